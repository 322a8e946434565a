"""The ledger counts from the cluster's own times what it hears of late: a pod that ended while the
hub was down, or while its watch was resuming after an API server outage, and one that started
while the hub was down."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from helpers.ledger import DAY0, Clock, ledger_at, pod, seconds
from traitlets.config import Config

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub import accounting
from jupyter_gpuburst.hub.capacity.ownership import PodOwnership
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.settings import settings_from_config


class NotUsed:
    """Any use of the Kubernetes API fails the test: accounting reads only the tracker's events."""

    def __getattr__(self, name: str):
        pytest.fail(f"accounting used the Kubernetes API: {name}")


def stamp(t: float) -> str:
    """A metav1.Time as the API server writes it: to the second."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduled_at(p: dict, t: float) -> dict:
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(t)}]
    return p


def finished_at(p: dict, t: float, phase: str = "Succeeded") -> dict:
    p["status"]["phase"] = phase
    p["status"]["containerStatuses"] = [
        {"name": "c", "state": {"terminated": {"exitCode": 0, "startedAt": stamp(t - 60), "finishedAt": stamp(t)}}}
    ]
    return p


def deleted_at(p: dict, t: float) -> dict:
    p["metadata"]["deletionTimestamp"] = stamp(t)
    p["metadata"]["deletionGracePeriodSeconds"] = 0
    return p


def test_a_deletion_heard_late_ends_at_the_deletion_not_when_the_watch_came_back(tmp_path) -> None:
    clock = Clock(DAY0 + 100.2)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p", node=None))
    ledger.pod_event("MODIFIED", "jhub/p", pod("p"))  # bound, seen at once: 100.2
    # removed at once (grace period 0) at 124.x, while the API server was just back and the hub's
    # watch still waited to resume; it hears of it 3 s later
    clock.t = DAY0 + 127.6
    ledger.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 124.3))
    clock.t += 100
    # to the middle of the deletion's second, not to 127.6
    assert seconds(ledger) == pytest.approx(124.5 - 100.2)


def test_an_end_heard_once_its_second_is_over_is_counted_from_that_second(tmp_path) -> None:
    clock = Clock(DAY0 + 100.0)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p"))
    clock.t = DAY0 + 125.48  # removed at 124.29, heard 1.19 s later: after its second was over
    ledger.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 124.29))
    assert seconds(ledger) == pytest.approx(24.5)


def test_an_end_heard_on_time_is_counted_at_the_hubs_finer_clock(tmp_path) -> None:
    clock = Clock(DAY0 + 100.2)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p"))
    clock.t = DAY0 + 130.1  # deleted at 130.05, heard 50 ms later
    ledger.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 130.05))
    assert seconds(ledger) == pytest.approx(29.9)
    clock.t = DAY0 + 200.0
    ledger.pod_event("ADDED", "jhub/q", pod("q"))
    clock.t = DAY0 + 260.9  # its containers ended at 260.7: the kubelet's status, on time
    ledger.pod_event("MODIFIED", "jhub/q", finished_at(pod("q"), DAY0 + 260.7))
    assert seconds(ledger) == pytest.approx(29.9 + 60.9)


def test_a_late_end_never_takes_back_what_is_counted_already(tmp_path) -> None:
    clock = Clock(DAY0 + 100.0)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p"))
    clock.t = DAY0 + 160.0
    ledger.flush()  # counted up to 160 while the watch was away
    clock.t = DAY0 + 170.0
    ledger.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 150.0))
    assert seconds(ledger) == pytest.approx(60.0)  # GPU-seconds only grow: Prometheus counters


def test_a_hub_that_starts_again_ends_what_finished_meanwhile_when_it_did_and_counts_what_started(tmp_path) -> None:
    path = tmp_path / "u.sqlite"
    clock = Clock(DAY0 + 100.0)
    first = ledger_at(path, clock, flush_seconds=60)
    first.pod_event("ADDED", "jhub/done", pod("done"))
    first.pod_event("ADDED", "jhub/gone", pod("gone"))
    clock.t = DAY0 + 110.0
    first.write()  # the hub's last write: it is alive at 110, then killed
    # down 60 s: "done" finishes at 130.x and stays listed (Succeeded); "gone" is removed; "new"
    # is bound at 150.x by a scheduler that does not wait for the hub
    clock.t = DAY0 + 170.0
    second = ledger_at(path, clock)
    second.pod_event("ADDED", "jhub/done", finished_at(pod("done"), DAY0 + 130.0))
    second.pod_event("ADDED", "jhub/new", scheduled_at(pod("new", user="bob"), DAY0 + 150.0))
    second.loaded()
    clock.t = DAY0 + 200.0
    # done: 100 -> 130.5 (its container's end, not 110 where the first hub was last alive);
    # gone: 100 -> 110, nothing in the cluster says when it went; new: 150.5 -> 200
    assert seconds(second, user="alice") == pytest.approx(30.5 + 10.0)
    assert seconds(second, user="bob") == pytest.approx(49.5)
    assert [s.pod for s in second.open_sessions()] == ["jhub/new"]
    assert list(second.store.open_sessions()) == ["uid-new"]


async def test_an_end_the_hub_heard_is_on_disk_before_it_can_be_killed(tmp_path) -> None:
    path = tmp_path / "u.sqlite"
    clock = Clock(DAY0 + 100.0)
    first = ledger_at(path, clock, write_delay=0.5)
    first.pod_event("ADDED", "jhub/p", pod("p"))  # bound, seen at once: 100.0
    clock.t = DAY0 + 100.3
    first.write()  # its last heartbeat
    # preempted (or stopped) at 105.3, heard at 105.4; the loop turns once, and the hub is killed
    # (SIGKILL: nothing of it runs again)
    clock.t = DAY0 + 105.4
    first.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 105.3))
    await asyncio.sleep(0)
    # the next hub's first list has no such pod: it can only go by what the first one wrote
    clock.t = DAY0 + 130.0
    second = ledger_at(path, clock)
    second.loaded()
    assert seconds(second) == pytest.approx(5.4)  # not 0.3: up to where the first hub last wrote


async def test_bindings_still_wait_to_be_written_together_and_an_end_takes_them_along(tmp_path) -> None:
    path = tmp_path / "u.sqlite"
    clock = Clock(DAY0 + 100.0)
    ledger = ledger_at(path, clock, write_delay=30.0)
    ledger.pod_event("ADDED", "jhub/a", pod("a"))
    ledger.pod_event("ADDED", "jhub/b", pod("b"))
    await asyncio.sleep(0)
    assert ledger.store.open_sessions() == {}  # a commit per binding would slow every watch event
    clock.t = DAY0 + 110.0
    ledger.pod_event("DELETED", "jhub/a", pod("a"))
    await asyncio.sleep(0)
    assert list(ledger.store.open_sessions()) == ["uid-b"]  # one commit: the end, and the binding before it


def test_the_tracker_hands_the_ledger_the_deleted_placeholder_with_its_deletion_time(tmp_path) -> None:
    config = Config()
    config.JupyterHub.db_url = f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    tracker = CapacityTracker(NotUsed(), settings_from_config(config), ownership=PodOwnership(["jhub"]))
    tracker.accounting = accounting.from_config(config, tracker.inventory.pod_requests)
    clock = Clock(DAY0 + 100.2)
    tracker.accounting.ledger.clock = clock
    tracker._on_node_event("ADDED", synthetic.node("gpu-a", {"nvidia.com/gpu": 2}))
    placeholder = scheduled_at(synthetic.watch_pod("gpuburst-pool-origin-gpu1-x", 1, "gpu-a", namespace="jhub"), DAY0 + 100.0)
    placeholder["metadata"]["labels"] = {keys.POOL_LABEL: "origin.gpu1", keys.POOL_SITE_LABEL: "origin", keys.POOL_PROFILE_LABEL: "gpu1"}
    tracker._on_pod_event("ADDED", placeholder)
    clock.t = DAY0 + 131.0  # preempted at 124.x, heard once the watch resumed
    tracker._on_pod_event("DELETED", deleted_at(placeholder, DAY0 + 124.0))
    rows = tracker.accounting.ledger.usage_rows("2000-01-01", "2100-01-01")
    assert [(r["mode"], r["gpu_seconds"]) for r in rows] == [("pool", pytest.approx(2 * 24.3))]  # 2 GPUs, 100.2 -> 124.5


def test_a_binding_replayed_by_a_watch_catching_up_is_counted_from_the_schedulers_second(tmp_path) -> None:
    clock = Clock(DAY0 + 21.74)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    # created and bound at 20.x while the watch was backing off; it comes back and delivers both
    # events in one go: the pod pending, then bound
    ledger.pod_event("ADDED", "jhub/p", pod("p", node=None))
    ledger.pod_event("MODIFIED", "jhub/p", scheduled_at(pod("p"), DAY0 + 20.0))
    clock.t = DAY0 + 40.0
    ledger.pod_event("DELETED", "jhub/p", deleted_at(pod("p"), DAY0 + 40.0))
    # from 20.5, not from 21.74 when the replay showed it pending
    assert seconds(ledger) == pytest.approx(19.5)


def test_a_hub_started_while_a_gpu_kernel_runs_on_a_donor_counts_it_from_its_first_list(tmp_path) -> None:
    """A donor's GPU kernels run in a namespace of their own. A hub started (or restarted) while
    one runs counts it from its first list of pods, not from whenever something first asks its
    kernel registry: until then it once counted nothing for them."""
    config = Config()
    config.JupyterHub.db_url = f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    config.KubeSpawner.namespace = "jhub"
    tracker = CapacityTracker(NotUsed(), settings_from_config(config), ownership=PodOwnership.from_config(config))
    tracker.accounting = accounting.from_config(config, tracker.inventory.pod_requests)
    clock = Clock(DAY0 + 100.2)
    tracker.accounting.ledger.clock = clock
    tracker._on_node_event("ADDED", synthetic.node("liqo-donor-1", {"nvidia.com/gpu": 8}))
    kernel = scheduled_at(synthetic.watch_pod("gpuburst-kernel-abc-1", 0, "liqo-donor-1", namespace="jhub-kernels-donor-1"), DAY0 + 90.0)
    kernel["metadata"]["labels"] = {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT, keys.KERNEL_LABEL: "abc", keys.SITE_LABEL: "donor-1"}
    kernel["metadata"]["annotations"] = {keys.USER_ANNOTATION: "ann", keys.KERNEL_ANNOTATION: "abc", keys.SERVER_ANNOTATION: ""}
    tracker._on_pod_event("ADDED", kernel)
    clock.t = DAY0 + 130.0
    rows = tracker.accounting.ledger.usage_rows("2000-01-01", "2100-01-01")
    assert [(r["user"], r["mode"], r["gpu_seconds"]) for r in rows] == [("ann", "kernel", pytest.approx(130.0 - 90.5))]
