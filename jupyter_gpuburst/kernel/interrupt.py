"""An interrupt that reaches the running cell: SIGINT to the kernel's main thread itself.

A GPU kernel is interrupted by message (its kernelspec's ``interrupt_mode``: the student's server
cannot signal a pod), and ipykernel answers an ``interrupt_request`` by sending SIGINT to its own
process, or to the process group it leads (a cell's subprocesses then hear it too). That signal is
process-directed, and Linux gives such a signal to the main thread only when it "wants" it: when
it is on a CPU, or has no signal pending already (``wants_signal`` in kernel/signal.c). On a loaded
node the main thread can be waiting for a CPU with another signal pending, and the SIGINT goes to
another of the kernel's threads. CPython runs a handler only in the main thread, at its next
Python instruction, and a main thread blocked in ``time.sleep`` or on a socket wakes only for a
signal delivered to it: the interrupt is lost for as long as the cell waits, and no reply comes
(seen once in 18 runs of the suite, on a 2-core machine under its full load).

So the kernel sends SIGINT to its main thread (``pthread_kill``, thread-directed: it wakes that
thread's blocking call) and, when it leads its process group, to each other process of the group,
as ipykernel does. A kernel of its own (``GPUBurstKernel``) does this in place of ipykernel's
``_send_interrupt_children``; the pod's entry point runs it (kernel/pod.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from ipykernel.ipkernel import IPythonKernel

PROC = Path("/proc")


def _group_members(pgid: int) -> Iterator[int]:
    """The pids of the processes in group ``pgid`` (read from /proc: what killpg would reach)."""
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # after the command name (in parentheses, which may hold spaces): state, ppid, pgrp
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            yield int(entry.name)


def interrupt_this_kernel() -> None:
    """SIGINT to this process's main thread, and to the rest of the group it leads."""
    pid = os.getpid()
    if os.getpgid(pid) == pid:
        for member in _group_members(pid):
            if member != pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(member, signal.SIGINT)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


class GPUBurstKernel(IPythonKernel):
    """ipykernel's IPython kernel, interrupted through its main thread (see the module)."""

    def _send_interrupt_children(self) -> None:
        if not PROC.is_dir():  # not Linux: ipykernel's own way
            super()._send_interrupt_children()
            return
        interrupt_this_kernel()
