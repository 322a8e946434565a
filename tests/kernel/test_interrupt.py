"""A GPU kernel's interrupt goes to its main thread (and to the group it leads), as kernel/interrupt.py says."""

from __future__ import annotations

import subprocess
import sys
import time

from ipykernel.kernelbase import Kernel

from jupyter_gpuburst.kernel.interrupt import GPUBurstKernel

# the kernel's side: a child in its group, a main thread asleep in a cell, another thread that
# handles the interrupt_request (as ipykernel's control thread does)
KERNEL = """
import signal, subprocess, sys, threading, time
from jupyter_gpuburst.kernel.interrupt import interrupt_this_kernel
signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel sets it for a cell
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
threading.Thread(target=lambda: (time.sleep(0.2), interrupt_this_kernel())).start()
started = time.monotonic()
try:
    time.sleep(30)
    print("cell ran on", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.1f}", flush=True)
try:
    print("child", child.wait(timeout=2), flush=True)
except subprocess.TimeoutExpired:
    print("child still running", flush=True)
    child.kill()
"""


def run_kernel(leads_its_group: bool) -> list[str]:
    done = subprocess.run([sys.executable, "-c", KERNEL], capture_output=True, text=True, timeout=60, start_new_session=leads_its_group)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_an_interrupt_wakes_the_sleeping_cell_at_once_and_reaches_the_groups_other_processes():
    started = time.monotonic()
    interrupted, child, _ = run_kernel(leads_its_group=True)
    assert interrupted.startswith("interrupted after") and float(interrupted.split()[-1]) < 5, interrupted
    # ended by SIGINT (CPython's exit after an uncaught KeyboardInterrupt): the group heard it, as
    # from ipykernel's killpg
    assert child == "child -2"
    assert time.monotonic() - started < 30


def test_a_kernel_that_does_not_lead_its_group_signals_nothing_else():
    # here the group is the test runner's: only the kernel itself may be interrupted
    interrupted, child, _ = run_kernel(leads_its_group=False)
    assert interrupted.startswith("interrupted after"), interrupted
    assert child == "child still running"


def test_the_kernel_replaces_the_method_ipykernel_interrupts_with():
    # a rename in ipykernel would leave ours unused, and interrupts process-directed again
    assert "_send_interrupt_children" in vars(Kernel)
    assert GPUBurstKernel._send_interrupt_children is not Kernel._send_interrupt_children
