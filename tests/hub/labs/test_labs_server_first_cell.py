"""A server-mode lab's report times each student from Start to the first cell that ran in a
kernel of their GPU server, as their server's activity report says it; where no first cell was
heard of, it times Start to a ready server and says so."""

from __future__ import annotations

import pytest
from helpers.lab_book import CLASS, GPU, at, open_book, report_at

from jupyter_gpuburst.hub.culling.store import ReportError, SignalStore

MIG = "nvidia.com/mig-1g.10gb"
MEMBERS = ["sam", "eve", "max", "ada"]


def test_server_mode_times_start_to_the_first_gpu_cell(tmp_path):
    book = open_book(tmp_path / "labs.sqlite", "server", MEMBERS)
    # sam presses Start at 10:00:00, his GPU server is ready at 10:00:05, his first cell at 10:01:30
    book.note_start("sam", CLASS, at(10, 0), None)
    book.note_start("sam", CLASS, at(10, 0), at(10, 0, 5))
    book.note_server_first_cell("sam", GPU, at(10, 1, 30))
    # eve's server says its first cell twice; a later report of a restarted server's cell, or
    # one heard out of order, leaves the earliest
    book.note_start("eve", CLASS, at(10, 2), at(10, 2, 10))
    book.note_server_first_cell("eve", GPU, at(10, 3))
    book.note_server_first_cell("eve", GPU, at(10, 8))
    book.note_server_first_cell("eve", GPU, at(10, 2, 40))
    # max's server is ready and ran no cell: started, not timed
    book.note_start("max", CLASS, at(10, 4), at(10, 4, 6))
    report = report_at(book, at(11, 5))
    assert report["measures"] == "server_first_gpu_cell"
    assert report["seconds_to_ready"] == {"p50": 40.0, "p95": 90.0, "measured": 2}
    assert report["timing"] == "From Start to the first GPU cell: 40 s for half of them, 90 s for 95%."
    assert report["started"] == ["eve", "max", "sam"] and report["still_waiting"] == [] and report["never_started"] == ["ada"]

    # a restarted hub reads the same from its store
    book.store.close()
    assert report_at(open_book(tmp_path / "labs.sqlite", "server", MEMBERS), at(11, 5))["seconds_to_ready"] == report["seconds_to_ready"]


def test_cells_without_a_start_before_it_outside_the_lab_or_on_other_gpus_are_not_first(tmp_path):
    book = open_book(tmp_path / "labs.sqlite", "server", MEMBERS)
    book.note_start("sam", CLASS, at(10, 10), at(10, 10, 5))
    book.note_server_first_cell("sam", GPU, at(10, 9))  # from before his Start in the lab
    book.note_server_first_cell("sam", MIG, at(10, 11))  # a server of other GPUs than the lab's
    book.note_first_cell("sam", GPU, at(10, 11))  # a GPU kernel's: the kernel-mode figure, not this one
    book.note_server_first_cell("ada", GPU, at(10, 11))  # ada never pressed Start in the lab
    book.note_start("max", CLASS, at(10, 50), at(10, 50, 5))
    book.note_server_first_cell("max", GPU, at(11, 1))  # after the lab's end
    report = report_at(book, at(11, 5))
    assert report["measures"] == "server_ready", report
    assert report["started"] == ["max", "sam"] and report["never_started"] == ["ada", "eve"]


def test_without_a_first_cell_the_report_times_a_ready_server_and_says_so(tmp_path):
    book = open_book(tmp_path / "labs.sqlite", "server", MEMBERS)
    assert report_at(book, at(10, 30))["timing"] == "No student's server was ready."
    book.note_start("sam", CLASS, at(10, 0), at(10, 0, 5))
    book.note_start("eve", CLASS, at(10, 1), None)  # still starting
    report = report_at(book, at(10, 30))
    assert report["measures"] == "server_ready" and report["seconds_to_ready"] == {"p50": 5.0, "p95": 5.0, "measured": 1}
    assert report["timing"] == (
        "From Start to a ready server (no student's first GPU cell was heard of): 5 s for half of them, 5 s for 95%."
    )
    assert report["started"] == ["sam"] and report["still_waiting"] == ["eve"]
    # once one is heard of, the figure is the first cell, for those it was heard of
    book.note_server_first_cell("sam", GPU, at(10, 1, 30))
    report = report_at(book, at(10, 30))
    assert report["measures"] == "server_first_gpu_cell" and report["seconds_to_ready"]["measured"] == 1
    assert report["seconds_to_ready"]["p50"] == 90.0


def test_the_hub_hears_the_servers_own_first_cell_as_a_time_on_its_clock():
    store, heard = SignalStore(), []

    def report(seq: int, **extra) -> None:
        body = {"server_name": "gpu", "boot": "b", "seq": seq, "gpu_idle_s": 1.0, **extra}
        store.report("ann", body, lambda record, server: False, now=1000.0, on_first_cell=lambda *a: heard.append(a))

    report(1)
    assert heard == []
    report(2, first_cell_ago_s=90.0)
    assert heard == [("gpu", "server", 910.0)]
    for nonsense in (-1, "soon", True, float("inf"), 31 * 24 * 3600):
        with pytest.raises(ReportError) as refused:
            report(3, first_cell_ago_s=nonsense)
        assert refused.value.status == 400 and "first_cell_ago_s must be null or a number of seconds" in refused.value.message
    with pytest.raises(ReportError) as replayed:  # a replay is refused before anything is handed on
        report(2, first_cell_ago_s=5.0)
    assert replayed.value.status == 409 and heard == [("gpu", "server", 910.0)]
