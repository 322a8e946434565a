"""`bench.cpu_share`: CPU time by role, from the process tree, as a benchmark reports it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from jupyter_gpuburst.bench.cpu_share import OTHER, CPUShare

# burns half a second of its own CPU time, says so, then waits to be killed (still there to be read)
BURN = "import time, sys\nwhile time.process_time() < 0.5: pass\nprint('done', flush=True)\ntime.sleep(60)\n"


def test_a_child_s_cpu_time_counts_for_its_root_s_role_and_the_rest_is_other():
    share = CPUShare({"benchmark": os.getpid()}, {"benchmark": "helpers"}, period=0.1)
    began = time.monotonic()
    share.sample()
    child = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        time.sleep(0.05)  # the next period's look, as the sampler's loop makes it
        share.sample()
        span = time.monotonic() - began
    finally:
        child.kill()
        child.wait()
    used = share.seconds_by_role()
    # the child's half second is its root's children's, not the root's own, nor another process's
    assert 0.45 <= used["helpers"] < 5, used
    assert used.get("benchmark", 0.0) < used["helpers"]
    summary = share.summary()
    assert summary["cpu_s_by_role"]["helpers"] == round(used["helpers"], 1)
    assert summary["cores"] == psutil.cpu_count() and summary["machine_busy_percent"]["periods"] == 1
    # the child was busy for most of the one period: its role's peak is its CPU time over that
    # period, not less (a loaded machine stretches the period, so the share is read from it)
    assert used["helpers"] / span - 0.01 <= summary["cores_by_role_peak"]["helpers"] <= summary["cores"]
    assert 0 < summary["machine_busy_percent"]["mean"] <= 100


def test_a_process_outside_every_root_is_other_and_a_root_is_its_own_role():
    share = CPUShare({"me": os.getpid()})
    ppid = {10: 1, 11: 10, os.getpid(): 10, 12: os.getpid(), 13: 12}
    assert share._role(11, ppid) == OTHER
    assert share._role(os.getpid(), ppid) == "me"
    assert share._role(13, ppid) == "me"  # with no name for its children, they are the root's
    assert share._role(99, ppid) == OTHER  # gone before its parent was read


def test_a_role_of_several_processes_holds_each_and_its_children():
    """A real control plane's processes (etcd, kube-apiserver, ...) share one role, nested in the
    benchmark's process tree; a root found before the benchmark's wins."""
    me = os.getpid()
    share = CPUShare({"benchmark": me, "control plane": [21, 22]}, {"benchmark": "pods"})
    ppid = {21: me, 22: me, 23: 22, 24: me}
    assert [share._role(pid, ppid) for pid in (21, 22, 23, 24)] == ["control plane", "control plane", "control plane", "pods"]


# starts a grandchild that waits, says its pid, then waits itself to be killed
PARENT = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_process_whose_parent_ends_keeps_the_role_it_was_first_seen_with():
    share = CPUShare({"benchmark": os.getpid()}, {"benchmark": "helpers"}, period=0.1)
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    try:
        share.sample()
        (key,) = [k for k in share._last if k[0] == grandchild]
        assert share._last[key][0] == "helpers"
        parent.kill()
        parent.wait()
        # reparented now (to init or a subreaper): its time stays the helpers'
        assert psutil.Process(grandchild).ppid() != parent.pid
        share.sample()
        assert share._last[key][0] == "helpers"
    finally:
        parent.kill()
        os.kill(grandchild, 9)
