"""The cached /proc parent table the sampler walks kernel process trees with."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import psutil
import pytest

from jupyter_gpuburst.gpu.attribution import process_tree
from jupyter_gpuburst.gpu.proctable import ProcessTable
from jupyter_gpuburst.gpu.sampler import Sample

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


@pytest.fixture
def tree():
    """sh -> sleep: a parent with one child, as a kernel running a shell command."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    # a test may have ended the group already; its sleep, orphaned, is gone as soon as whoever
    # adopted it reaps it (a quick init, a subreaper), and then killpg finds no group
    with contextlib.suppress(ProcessLookupError):
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


def _fake_proc(root, pids: dict[int, tuple[int, int]]) -> None:
    """A /proc with one stat file per pid: pid -> (ppid, start time)."""
    (root / "self").mkdir(exist_ok=True)
    (root / "self" / "stat").write_text("1 (init) S 0")
    for pid, (ppid, start) in pids.items():
        (root / str(pid)).mkdir(exist_ok=True)
        fields = ["S", str(ppid), *["0"] * 17, str(start), "0"]
        (root / str(pid) / "stat").write_text(f"{pid} (kernel (x)) " + " ".join(fields))


def test_refresh_says_whether_anything_started_or_exited(tmp_path):
    _fake_proc(tmp_path, {10: (1, 100), 11: (10, 101)})
    table = ProcessTable(proc_root=str(tmp_path))
    assert table.refresh() is True
    assert table.tree(10) == {10, 11}
    reads = table.stat_reads
    assert table.refresh() is False  # the same processes: nothing re-read, trees still current
    assert table.stat_reads == reads
    _fake_proc(tmp_path, {12: (11, 102)})
    assert table.refresh() is True
    assert table.tree(10) == {10, 11, 12}
    assert table.stat_reads == reads + 1
    (tmp_path / "12" / "stat").unlink()
    (tmp_path / "12").rmdir()
    assert table.refresh() is True
    assert table.tree(10) == {10, 11}
