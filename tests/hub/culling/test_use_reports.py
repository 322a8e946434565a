"""A report's GPU use (for right-sizing) is checked like the rest of the report: nonsense is a
clear 400 that changes nothing, and only the server's own GPU kernels' figures are handed on."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.hub.culling.store import ReportError, SignalStore

GIB = 2**30
USE = {
    "peak_memory_bytes": 6 * GIB,
    "memory_total_bytes": 40 * GIB,
    "peak_utilization": 0.5,
    "utilization_sum": 1.0,
    "utilization_samples": 4,
}


def owns(record_id: str, server_name: str) -> bool:
    return record_id == "mine"


def test_the_servers_and_its_own_kernels_use_are_handed_on():
    store, heard = SignalStore(), []
    body = {
        "server_name": "",
        "boot": "b",
        "seq": 1,
        "gpu_idle_s": 3.0,
        "use": USE,
        "kernels": {"mine": {"idle_s": 1.0, "use": {**USE, "peak_memory_bytes": GIB}}, "theirs": {"idle_s": 1.0, "use": USE}},
    }
    _, ignored = store.report("ann", body, owns, now=100.0, on_use=lambda *args: heard.append(args))
    assert ignored == ["theirs"]
    assert heard == [("", "server", {**USE, "peak_memory_bytes": float(6 * GIB)}), ("", "mine", {**USE, "peak_memory_bytes": float(GIB)})]
    # a replayed report is refused before any figure is handed on
    with pytest.raises(ReportError):
        store.report("ann", body, owns, now=101.0, on_use=lambda *args: heard.append(args))
    assert len(heard) == 2


@pytest.mark.parametrize(
    ("use", "said"),
    [
        ("lots", "use must be null or an object"),
        ({"peak_memory_bytes": -1}, "use.peak_memory_bytes must be null or a number of bytes"),
        ({"peak_memory_bytes": float("nan")}, "use.peak_memory_bytes"),
        ({"peak_utilization": 7}, "use.peak_utilization must be null or a fraction from 0 to 1"),
        ({"utilization_samples": 2, "utilization_sum": 3}, "use.utilization_sum must be null or a number from 0 to 2"),
        ({"utilization_samples": True}, "use.utilization_samples must be a whole number"),
        ({"peak_gpu": 1}, "use: unknown field(s): peak_gpu"),
    ],
)
def test_nonsense_use_is_a_clear_400_and_changes_nothing(use, said):
    store, heard = SignalStore(), []
    body = {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": 3.0, "use": use}
    with pytest.raises(ReportError) as refused:
        store.report("ann", body, owns, now=100.0, on_use=lambda *args: heard.append(args))
    assert refused.value.status == 400 and said in refused.value.message
    assert heard == [] and store.signals == {} and store.sequence == {}
    # the same in a kernel's entry
    body = {"server_name": "", "boot": "b", "seq": 1, "kernels": {"mine": {"idle_s": 1.0, "use": use}}}
    with pytest.raises(ReportError):
        store.report("ann", body, owns, now=100.0, on_use=lambda *args: heard.append(args))
    assert heard == [] and store.signals == {}
