"""The capacity tracker moves the loaded inventory out of the garbage collector's way, once.

Each case runs in a fresh interpreter: freezing and the collector's thresholds are process-wide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from jupyter_gpuburst.bench import synthetic
    from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
    from jupyter_gpuburst.hub.settings import GPUBurstSettings

    if sys.argv[1] == "operator":
        gc.set_threshold(1000, 15, 15)

    async def main():
        plan = synthetic.ClusterPlan(20, 100, 1, seed=3)
        tracker = CapacityTracker(None, GPUBurstSettings())
        for node in plan.nodes:
            tracker._on_node_event("ADDED", node)
        for pod in plan.live_pods():
            tracker._on_pod_event("ADDED", pod)
        before = gc.get_freeze_count()
        tracker.loaded()
        first = gc.get_freeze_count()
        tracker.loaded()
        print(json.dumps({"before": before, "first": first, "second": gc.get_freeze_count(),
                          "thresholds": gc.get_threshold(), "enabled": gc.isenabled()}))

    asyncio.run(main())
    """
)


def _run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def test_loaded_freezes_the_inventory_once_and_tunes_default_thresholds() -> None:
    result = _run("default")
    assert result["before"] == 0
    assert result["first"] > 1000  # the inventory and everything else alive at that moment
    assert result["second"] == result["first"]  # a second tracker freezes nothing more
    assert result["thresholds"] == [200, 10, 100]
    assert result["enabled"] is True


def test_loaded_keeps_an_operators_own_thresholds() -> None:
    result = _run("operator")
    assert result["thresholds"] == [1000, 15, 15]
    assert result["first"] > 1000


def test_the_tracker_keeps_a_placed_pods_metadata_status_and_requests_only() -> None:
    from jupyter_gpuburst.bench import synthetic
    from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
    from jupyter_gpuburst.hub.settings import GPUBurstSettings

    tracker = CapacityTracker(None, GPUBurstSettings())
    tracker.own_namespace(synthetic.SERVER_NAMESPACE)
    pod = synthetic.watch_pod("jupyter-ann", 0, "node-0", site="origin", user="ann")
    tracker._on_pod_event("ADDED", pod)
    kept = tracker.pod(synthetic.SERVER_NAMESPACE, "jupyter-ann")
    assert kept is not None
    assert kept["metadata"] == pod["metadata"] and kept["status"] == pod["status"]
    assert kept["spec"] == {
        "nodeName": "node-0",
        "containers": [{"name": "main", "resources": pod["spec"]["containers"][0]["resources"]}],
    }
    # what the capacity page shows of it is what the whole pod would show
    assert tracker.inventory.pod_requests(kept) == tracker.inventory.pod_requests(pod)
