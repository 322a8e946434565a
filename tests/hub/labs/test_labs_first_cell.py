"""A kernel-mode lab's report times each student from asking for a GPU kernel to the first cell
that ran on one, not from Start to their CPU server; the moment comes from the kernel's pod,
through its server's activity report, and is kept in the lab book's store across restarts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.lab_book import CLASS, GPU, at, open_book

from jupyter_gpuburst.hub.culling.store import ReportError, SignalStore
from jupyter_gpuburst.kernel.gpu import KernelGPUReporter, install_in_kernel

MEMBERS = ["sam", "eve", "max"]


@pytest.fixture
def kernel_lab(tmp_path):
    return open_book(tmp_path / "labs.sqlite", "kernel", MEMBERS)


def test_kernel_mode_times_the_first_gpu_cell_not_the_server_start(kernel_lab, tmp_path):
    book = kernel_lab
    # sam presses Start at 10:00:00, his CPU server is ready at 10:00:05 and he asks for a GPU
    # kernel then; its first cell runs at 10:02:00
    book.note_start("sam", CLASS, at(10, 0), None)
    book.note_start("sam", CLASS, at(10, 0), at(10, 0, 5))
    book.note_kernel_asked("sam", CLASS, GPU, at(10, 0, 5))
    # eve asks twice (the second request changes nothing) and runs her first cell 30 s after the first
    book.note_kernel_asked("eve", CLASS, GPU, at(10, 1))
    book.note_kernel_asked("eve", CLASS, GPU, at(10, 1, 20))
    book.note_first_cell("eve", GPU, at(10, 1, 30))
    book.note_first_cell("eve", GPU, at(10, 5))  # a later report of a later kernel: the first stays
    book.note_first_cell("sam", GPU, at(10, 2))
    # max asked and no cell ran on his kernel; oli, outside the class, is not counted
    book.note_kernel_asked("max", CLASS, GPU, at(10, 3))
    book.note_kernel_asked("oli", frozenset({"cv-200"}), GPU, at(10, 3))
    book.note_first_cell("oli", GPU, at(10, 4))
    book.clock_at["now"] = at(11, 5)
    report = book.report(book.bookings()[0].id)
    assert report["measures"] == "first_gpu_cell"
    assert report["started"] == ["eve", "sam"] and report["still_waiting"] == ["max"] and report["never_started"] == []
    # 115 s for sam (not the 5 s his server took), 30 s for eve
    assert report["seconds_to_ready"] == {"p50": 30.0, "p95": 115.0, "measured": 2}
    assert report["timing"] == "From asking for a GPU kernel to its first cell: 30 s for half of them, 115 s for 95%."

    # a restarted hub reads the same from its store
    book.store.close()
    again = open_book(tmp_path / "labs.sqlite", "kernel", MEMBERS)
    again.clock_at["now"] = at(11, 5)
    assert again.report(again.bookings()[0].id)["seconds_to_ready"] == report["seconds_to_ready"]


def test_a_cell_outside_the_lab_or_before_the_ask_or_on_other_gpus_is_not_the_first(kernel_lab):
    book = kernel_lab
    book.note_kernel_asked("sam", CLASS, GPU, at(10, 10))
    book.note_first_cell("sam", GPU, at(10, 9))  # a kernel's cell from before he asked in the lab
    book.note_first_cell("sam", "nvidia.com/mig-1g.10gb", at(10, 11))  # not the lab's GPUs
    book.note_kernel_asked("eve", CLASS, "nvidia.com/mig-1g.10gb", at(10, 10))  # not the lab's GPUs either
    book.note_kernel_asked("max", CLASS, GPU, at(10, 50))
    book.note_first_cell("max", GPU, at(11, 1))  # after the lab's end: he was still waiting at its end
    book.clock_at["now"] = at(11, 5)
    report = book.report(book.bookings()[0].id)
    assert report["started"] == [] and report["still_waiting"] == ["max", "sam"] and report["never_started"] == ["eve"]
    assert report["seconds_to_ready"] == {"p50": None, "p95": None, "measured": 0}
    assert report["timing"] == "No student ran a GPU cell."


def test_a_gpu_kernels_first_cell_is_no_server_mode_labs_figure(tmp_path):
    # server mode times the first cell of the GPU server itself (test_labs_server_first_cell)
    book = open_book(tmp_path / "labs.sqlite", "server", MEMBERS)
    book.note_start("sam", CLASS, at(10, 0), at(10, 0, 5))
    book.note_kernel_asked("sam", CLASS, GPU, at(10, 0, 5))  # not a kernel-mode lab: not kept
    book.note_first_cell("sam", GPU, at(10, 2))
    book.clock_at["now"] = at(10, 30)
    report = book.report(book.bookings()[0].id)
    assert report["measures"] == "server_ready" and report["seconds_to_ready"]["p50"] == 5.0


def test_the_kernel_pod_says_how_long_ago_its_first_cell_began():
    events: dict[str, list] = {}
    shell = SimpleNamespace(events=SimpleNamespace(register=lambda name, fn: events.setdefault(name, []).append(fn)))
    kernel = SimpleNamespace(control_handlers={})
    reporter = KernelGPUReporter(SimpleNamespace(name="none", simulated=False, reason="no GPU visible"), "k")
    install_in_kernel(kernel, shell, reporter)
    assert reporter.report()["first_cell_ago_s"] is None
    for hook in events["pre_run_cell"]:
        hook()
    reporter.first_cell_at -= 40  # as if it began 40 s ago
    for hook in events["post_run_cell"] + events["pre_run_cell"]:  # a second cell leaves it
        hook()
    assert 40 <= reporter.report()["first_cell_ago_s"] < 45


def test_the_hub_hears_its_own_kernels_first_cells_as_times_on_its_clock():
    store, heard = SignalStore(), []

    def report(seq: int, kernels: dict) -> list[str]:
        body = {"server_name": "", "boot": "b", "seq": seq, "kernels": kernels}
        return store.report("ann", body, lambda record, server: record == "mine", now=1000.0, on_first_cell=lambda *a: heard.append(a))[1]

    ignored = report(1, {"mine": {"idle_s": 1.0}, "theirs": {"idle_s": 1.0, "first_cell_ago_s": 5}})
    assert ignored == ["theirs"] and heard == []
    report(2, {"mine": {"idle_s": 1.0, "first_cell_ago_s": 115.0}})
    assert heard == [("", "mine", 885.0)]
    for nonsense in (-1, "soon", True, float("nan")):
        with pytest.raises(ReportError) as refused:
            report(3, {"mine": {"idle_s": 1.0, "first_cell_ago_s": nonsense}})
        assert refused.value.status == 400 and "first_cell_ago_s must be null or a number of seconds" in refused.value.message
    assert heard == [("", "mine", 885.0)]
