"""Reading only new events from KubeSpawner's event reflector, and finding FailedScheduling."""

from __future__ import annotations

from jupyter_gpuburst.hub.capacity.watch import NewEvents
from jupyter_gpuburst.hub.sites.unschedulable import failed_scheduling_reason

GPU = "nvidia.com/gpu"


def _event(name: str, reason: str, pod: str, uid: str, message: str = "") -> dict:
    return {"metadata": {"name": name}, "reason": reason, "message": message, "involvedObject": {"kind": "Pod", "name": pod, "uid": uid}}


def test_each_event_is_read_once_and_a_new_dict_is_read_again() -> None:
    resources = {"ns/e1": _event("e1", "Scheduled", "p", "u1"), "ns/e2": _event("e2", "Pulled", "p", "u1")}
    reader = NewEvents()
    assert [e["metadata"]["name"] for e in reader.read(resources)] == ["e1", "e2"]
    assert reader.read(resources) == []
    resources["ns/e3"] = _event("e3", "Started", "p", "u1")
    assert [e["metadata"]["name"] for e in reader.read(resources)] == ["e3"]
    relisted = dict(resources)  # a relist builds a new dict
    assert len(reader.read(relisted)) == 3
    del relisted["ns/e1"], relisted["ns/e2"]  # removed below the read position: read it all again
    assert [e["metadata"]["name"] for e in reader.read(relisted)] == ["e3"]


def test_events_expired_before_the_mark_do_not_hide_new_ones() -> None:
    resources = {f"ns/e{i}": _event(f"e{i}", "Scheduled", "p", "u1") for i in range(5)}
    reader = NewEvents()
    assert len(reader.read(resources)) == 5
    for i in range(3):  # three old events expire, five new arrive: more than were removed
        del resources[f"ns/e{i}"]
    for i in range(5, 10):
        resources[f"ns/e{i}"] = _event(f"e{i}", "Started", "p", "u1")
    names = [e["metadata"]["name"] for e in reader.read(resources)]
    assert {f"e{i}" for i in range(5, 10)} <= set(names)
    assert reader.read(resources) == []


POD = {"metadata": {"name": "jupyter-x"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}]}}


def test_failed_scheduling_is_matched_on_pod_uid_and_resource() -> None:
    message = f"0/3 nodes are available: 3 Insufficient {GPU}."
    events = [
        _event("a", "FailedScheduling", "jupyter-x", "old-uid", message),  # an earlier pod of that name
        _event("b", "FailedScheduling", "jupyter-y", "u", message),  # another pod
        _event("c", "FailedScheduling", "jupyter-x", "u", "0/3 nodes are available: 3 Insufficient cpu."),
        _event("d", "Scheduled", "jupyter-x", "u", GPU),
    ]
    assert failed_scheduling_reason(events, POD, "u", GPU) is None
    events.append(_event("e", "FailedScheduling", "jupyter-x", "u", message))
    assert failed_scheduling_reason(events, POD, "u", GPU) == message


def test_events_before_the_pod_was_made_are_skipped() -> None:
    resources = {f"ns/e{i}": _event(f"e{i}", "Scheduled", "other", "u0") for i in range(3)}
    reader = NewEvents()
    reader.skip_to_end(resources)
    assert reader.read(resources) == []
    resources["ns/new"] = _event("new", "FailedScheduling", "p", "u1", GPU)
    assert [e["metadata"]["name"] for e in reader.read(resources)] == ["new"]
