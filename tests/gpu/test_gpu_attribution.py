"""Kernel <-> GPU process attribution, on real processes and on a scripted /proc."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from jupyter_gpuburst.gpu.attribution import KernelPids, attribute, namespace_aliases, process_tree, resolve
from jupyter_gpuburst.gpu.backend import GPUProcess, KernelRef

CHILD = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); print(p.pid, flush=True); time.sleep(30)"


@pytest.fixture
def kernel_with_child():
    parent = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        yield parent.pid, child_pid
    finally:
        for proc in process_tree(parent.pid) - {parent.pid}:
            try:
                import os
                import signal

                os.kill(proc, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait()


def test_child_process_memory_is_attributed_to_its_kernel(kernel_with_child):
    parent_pid, child_pid = kernel_with_child
    kernel = KernelRef("k1", "python3", "train.ipynb", parent_pid, "busy")
    other = KernelRef("k2", "python3", None, None, "idle")
    resolved = resolve([kernel, other])
    assert {parent_pid, child_pid} <= resolved[0].pids
    procs = [
        GPUProcess(child_pid, "GPU-a", 3 << 30),
        GPUProcess(parent_pid, "GPU-a", 1 << 30),
        GPUProcess(parent_pid, "GPU-b", None),
        GPUProcess(999_999_9, "GPU-a", 5 << 30),
    ]
    kernels, unattributed = attribute(resolved, procs)
    assert kernels[0]["kernel_id"] == "k1" and kernels[0]["notebook"] == "train.ipynb"
    assert kernels[0]["gpus"] == [
        {"uuid": "GPU-a", "memory_used_bytes": 4 << 30},
        {"uuid": "GPU-b", "memory_used_bytes": None},
    ]
    assert kernels[1]["gpus"] == []
    assert unattributed == [{"pid": 999_999_9, "gpu_uuid": "GPU-a", "memory_used_bytes": 5 << 30}]


def test_nspid_aliases_from_proc(tmp_path):
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "status").write_text("Name:\tpython\nPid:\t77\nNSpid:\t31077\t77\n")
    assert namespace_aliases(77, str(tmp_path)) == {31077, 77}
    assert namespace_aliases(78, str(tmp_path)) == {78}  # not visible: only itself


def test_host_pid_matched_through_namespace_alias():
    kernel = KernelRef("k1", "python3", None, 77, "idle")
    resolved = resolve([kernel], tree=lambda pid: {pid, 80}, aliases=lambda pid: {pid, pid + 31000})
    kernels, unattributed = attribute(resolved, [GPUProcess(31080, "GPU-a", 1024), GPUProcess(40000, "GPU-a", 1)])
    assert kernels[0]["gpus"] == [{"uuid": "GPU-a", "memory_used_bytes": 1024}]
    assert [u["pid"] for u in unattributed] == [40000]


def test_pid_collision_rejected_by_verification():
    resolved = [KernelPids(KernelRef("k1", "python3", None, 77, "idle"), frozenset({77}), frozenset())]
    kernels, unattributed = attribute(resolved, [GPUProcess(77, "GPU-a", 10)], verify=lambda pid: False)
    assert kernels[0]["gpus"] == [] and unattributed[0]["pid"] == 77


def test_vanished_kernel_process_has_empty_tree():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    time.sleep(0.05)
    assert process_tree(proc.pid) == set()
