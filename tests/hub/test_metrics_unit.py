"""The recording functions: cheap, never raising, with conventional names."""

from __future__ import annotations

from helpers.fakes import GPU, StaticTracker
from prometheus_client import REGISTRY

from jupyter_gpuburst.hub import metrics
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_record_spawn_counts_per_site_and_outcome():
    before = sample("jupyterhub_gpuburst_spawns_total", site="donor-9", outcome="success") or 0
    metrics.record_spawn("donor-9", "success")
    assert sample("jupyterhub_gpuburst_spawns_total", site="donor-9", outcome="success") == before + 1
    # a new site gets every outcome at once, so rates over it exist before its first failure
    assert sample("jupyterhub_gpuburst_spawns_total", site="donor-9", outcome="failure") == 0


def test_bad_values_never_raise():
    before = sample("jupyterhub_gpuburst_spawns_total", site="none", outcome="no_capacity")
    metrics.record_spawn(None, "no_capacity")
    assert sample("jupyterhub_gpuburst_spawns_total", site="none", outcome="no_capacity") == before + 1
    metrics.record_spawn("origin", "exploded")  # unknown outcome: counted as a failure, no error
    metrics.observe_decision("not a number")  # type: ignore[arg-type]
    metrics.set_queue_length(None)  # type: ignore[arg-type]
    metrics.record_redirect(None, None)


def test_redirects_decisions_and_queue():
    metrics.record_redirect("origin", "donor-1")
    assert sample("jupyterhub_gpuburst_redirects_total", from_site="origin", to_site="donor-1") >= 1
    count = sample("jupyterhub_gpuburst_placement_decision_duration_seconds_count") or 0
    metrics.observe_decision(0.0004)
    assert sample("jupyterhub_gpuburst_placement_decision_duration_seconds_count") == count + 1
    assert sample("jupyterhub_gpuburst_placement_decision_duration_seconds_bucket", le="0.0005") >= 1
    metrics.set_queue_length(4)
    assert sample("jupyterhub_gpuburst_spawn_queue_length") == 4
    metrics.set_queue_length(0)


def test_capacity_source_is_read_at_scrape_time_and_dropped_when_gone(monkeypatch):
    # hub trackers started elsewhere in this process would report sites of their own
    monkeypatch.setattr(CapacityTracker, "_instances", {})
    tracker = StaticTracker()
    metrics.add_capacity_source(tracker.snapshot)
    metrics.add_capacity_source(tracker.snapshot)  # once is enough
    assert sample("jupyterhub_gpuburst_gpus_free", site="donor-1", resource=GPU) == 5
    tracker.inventory.apply_pod_event("DELETED", {"metadata": {"name": "jupyter-bob", "namespace": "jupyter"}})
    assert sample("jupyterhub_gpuburst_gpus_free", site="donor-1", resource=GPU) == 8
    del tracker
    assert sample("jupyterhub_gpuburst_gpus_free", site="donor-1", resource=GPU) is None


def test_names_follow_the_conventions():
    names = {metric.name for metric in REGISTRY.collect() if metric.name.startswith("jupyterhub_gpuburst_")}
    assert "jupyterhub_gpuburst_spawns" in names  # counter family; samples carry _total
    assert "jupyterhub_gpuburst_placement_decision_duration_seconds" in names
    assert not any(name.endswith("_total") for name in names)
