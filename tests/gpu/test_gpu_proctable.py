"""The cached /proc parent table the sampler walks kernel process trees with."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from jupyter_gpuburst.server.gpu.attribution import process_tree
from jupyter_gpuburst.server.gpu.proctable import ProcessTable
from jupyter_gpuburst.server.gpu.sampler import Sample

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


@pytest.fixture
def tree():
    """sh -> sleep: a parent with one child, as a kernel running a shell command."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    os.killpg(proc.pid, 9)
    proc.wait()


def test_tree_matches_psutil(tree):
    table = ProcessTable()
    table.refresh()
    assert table.tree(tree.pid) == process_tree(tree.pid)
    assert len(table.tree(tree.pid)) == 2


def test_refresh_reads_only_new_processes(tree):
    table = ProcessTable()
    table.refresh()
    first = table.stat_reads
    table.refresh()
    # nothing new: at most the few processes that started meanwhile on this machine were read
    assert table.stat_reads - first < first
    child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        table.refresh()
        assert child.pid in table.tree(os.getpid())
    finally:
        child.kill()
        child.wait()
    table.refresh()
    assert child.pid not in table.tree(os.getpid())


def test_gone_process_has_an_empty_tree(tree):
    table = ProcessTable()
    table.refresh()
    pid = tree.pid
    os.killpg(pid, 9)
    tree.wait()
    table.refresh()
    assert table.tree(pid) == set()


def test_aliases_include_the_pid_itself():
    table = ProcessTable()
    table.refresh()
    assert os.getpid() in table.aliases(os.getpid())


def test_missing_proc_falls_back_to_psutil(tmp_path):
    table = ProcessTable(proc_root=str(tmp_path))
    assert table.available is False
    table.refresh()
    assert os.getpid() in table.tree(os.getpid())


def test_sample_views_are_built_once_and_hide_kernels():
    sample = Sample(data={"gpus": [], "kernels": [{"kernel_id": "k"}]}, encoded=b'{"gpus":[],"kernels":[{"kernel_id":"k"}]}', seq=1)
    assert sample.body(True) is sample.encoded
    hidden = sample.body(False)
    assert b"kernel_id" not in hidden and hidden is sample.body(False)
    frame = sample.sse(True)
    assert frame == b"event: sample\ndata: " + sample.encoded + b"\n\n" and frame is sample.sse(True)
    assert b"kernel_id" not in sample.sse(False)
