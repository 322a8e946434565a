"""What the spawn page shows: headline kinds, escaped text, and no container-runtime noise."""

from jupyter_gpuburst.hub.spawner import messages as spawn_messages


def kube_event(reason: str, message: str, type_: str = "Normal") -> dict:
    raw = {"reason": reason, "message": message, "type": type_, "lastTimestamp": "2026-01-01T00:00:00Z"}
    return {"progress": 40, "raw_event": raw, "message": f"2026-01-01T00:00:00Z [{type_}] {message}"}


def test_decisions_are_headlines_and_escaped() -> None:
    event = spawn_messages.message("Starting on donor-1 <b>now</b>", "decision", progress=5)
    assert event["message"] == "Starting on donor-1 <b>now</b>"
    assert 'data-kind="decision" data-headline="true"' in event["html_message"]
    assert "&lt;b&gt;now&lt;/b&gt;" in event["html_message"] and event["progress"] == 5
    assert 'data-headline="false"' in spawn_messages.message("Pod created", "info")["html_message"]


def test_container_runtime_events_are_left_out_but_a_pull_is_shown() -> None:
    for reason in ("Created", "Started"):
        assert spawn_messages.is_runtime_noise(kube_event(reason, "Started container notebook"))
    assert spawn_messages.is_runtime_noise(kube_event("Pulled", 'Container image "x:1" already present on machine'))
    assert not spawn_messages.is_runtime_noise(kube_event("Pulling", 'Pulling image "x:1"'))
    pulled = 'Successfully pulled image "x:1" in 41.2s (41.2s including waiting). Image size: 6442450944 bytes.'
    assert not spawn_messages.is_runtime_noise(kube_event("Pulled", pulled))
    assert not spawn_messages.is_runtime_noise(kube_event("Scheduled", "Successfully assigned x to n"))
    assert not spawn_messages.is_runtime_noise({"message": "still waiting"})


def test_a_pull_is_said_in_a_students_words() -> None:
    pulled = 'Successfully pulled image "x:1" in 41.2s (41.2s including waiting). Image size: 6442450944 bytes.'
    assert spawn_messages.pod_event(kube_event("Pulled", pulled))["message"] == 'Pulled image "x:1" (6.4 GB) in 41.2s.'
    older = 'Successfully pulled image "x:1" in 3m2.1s'  # kubelets before 1.28 say neither size nor waiting
    assert spawn_messages.pulled(older + ".") == 'Pulled image "x:1" in 3m2.1s.'
    assert spawn_messages.pulled("something else") == "something else"


def test_scheduling_trouble_is_said_plainly() -> None:
    event = spawn_messages.pod_event(kube_event("FailedScheduling", "0/3 nodes are available", "Warning"))
    assert event["message"] == "Not scheduled yet: 0/3 nodes are available"
    assert event["progress"] == 40 and 'data-kind="pod-failedscheduling"' in event["html_message"]
    assert spawn_messages.pod_event({"message": "patience"}) == {"message": "patience"}
