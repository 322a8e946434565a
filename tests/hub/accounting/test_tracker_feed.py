"""The capacity tracker feeds the ledger from its own pod events, and accounting reads nothing from
Kubernetes: a tracker whose API client fails on any use still counts a spawn's GPU-hours."""

from __future__ import annotations

import datetime as dt

import pytest
from traitlets.config import Config

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.hub import accounting
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.settings import settings_from_config


class NoAPI:
    """Any read or write of the Kubernetes API fails the test."""

    def __getattr__(self, name: str):
        pytest.fail(f"accounting used the Kubernetes API: {name}")


def test_a_spawn_is_counted_from_the_trackers_events_without_api_calls(tmp_path) -> None:
    config = Config()
    config.JupyterHub.db_url = f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    tracker = CapacityTracker(NoAPI(), settings_from_config(config))
    tracker.accounting = accounting.from_config(config, tracker.inventory.pod_requests)
    assert tracker.accounting.ledger.store.path == str(tmp_path / "gpuburst-usage.sqlite")
    clock = [1_795_000_000.0]
    tracker.accounting.ledger.clock = lambda: clock[0]
    tracker.own_namespace(synthetic.SERVER_NAMESPACE)
    tracker._on_node_event("ADDED", synthetic.node("gpu-a", {"nvidia.com/gpu": 2}))
    pending = synthetic.watch_pod("jupyter-ada", 1, None, site="origin", user="ada", phase="Pending")
    tracker._on_pod_event("ADDED", pending)
    clock[0] += 5
    bound = synthetic.watch_pod("jupyter-ada", 1, "gpu-a", site="origin", user="ada", version=2)
    # the scheduler's condition says when it bound the pod: now, to the second
    scheduled = dt.datetime.fromtimestamp(clock[0], dt.UTC).isoformat().replace("+00:00", "Z")
    bound["status"]["conditions"] = [{**c, "lastTransitionTime": scheduled} for c in bound["status"]["conditions"]]
    tracker._on_pod_event("MODIFIED", bound)
    clock[0] += 600
    tracker._on_pod_event("DELETED", synthetic.watch_pod("jupyter-ada", 1, "gpu-a", site="origin", user="ada", version=3))
    rows = tracker.accounting.ledger.usage_rows("2000-01-01", "2100-01-01")
    assert [(r["user"], r["gpu_seconds"]) for r in rows] == [("ada", pytest.approx(1200.0))]  # 2 GPUs for 10 minutes


def test_accounting_can_be_turned_off() -> None:
    config = Config()
    config.GPUAccountingSettings.enabled = False
    assert accounting.from_config(config, lambda pod: {}) is None
    assert accounting.from_config(None, lambda pod: {}) is None


def test_an_idle_source_reaches_ledgers_made_before_and_after(tmp_path) -> None:
    config = Config()
    config.GPUAccountingSettings.ledger_path = str(tmp_path / "a.sqlite")
    before = accounting.from_config(config, lambda pod: {})

    def source(user, server, target):
        return None

    try:
        accounting.use_idle_source(source)
        config.GPUAccountingSettings.ledger_path = str(tmp_path / "b.sqlite")
        after = accounting.from_config(config, lambda pod: {})
        assert before.ledger.idle_source is source and after.ledger.idle_source is source
        assert after.ledger.counts_idle
    finally:
        accounting.use_idle_source(None)
