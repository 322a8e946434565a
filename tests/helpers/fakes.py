"""A capacity tracker over a fixed set of nodes and pods (real Inventory, no watches).

Imported by the hub's config file in the child process, and by the tests to compute the
numbers the hub must report.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory, Snapshot
from jupyter_gpuburst.hub.capacity.tracker import pod_server_key

GPU = "nvidia.com/gpu"
SECRET_ENV = "GPUBURST_TEST_SECRET"


def nodes() -> list[dict[str, Any]]:
    return [
        synthetic.node("gpu-a", {GPU: 2}),
        synthetic.node("gpu-b", {GPU: 4, synthetic.MIG_RESOURCE: 7}),
        synthetic.node("cpu-1"),
        synthetic.node("liqo-donor-1", {GPU: 8}, cluster_id="donor-1"),
        synthetic.node("liqo-donor-2", {GPU: 16}, cluster_id="donor-2", ready=False),
    ]


def pods() -> list[dict[str, Any]]:
    out = [
        synthetic.pod("jupyter-alice", node_name="gpu-a", gpus={GPU: 2}, site="origin", user="alice"),
        synthetic.pod("jupyter-bob", node_name="liqo-donor-1", gpus={GPU: 3}, site="donor-1", user="bob"),
        synthetic.pod("jupyter-carol", node_name="gpu-b", gpus={synthetic.MIG_RESOURCE: 1}, site="origin", user="carol", phase="Pending"),
        synthetic.pod("other-team-job", node_name="gpu-b", gpus={GPU: 1}),
    ]
    # a secret in the pod env must never reach the report
    out[0]["spec"]["containers"][0]["env"] = [{"name": "JUPYTERHUB_API_TOKEN", "value": os.environ.get(SECRET_ENV, "s3cr3t")}]
    return out


class StaticTracker:
    """The part of ``CapacityTracker`` the hub reads, over fixed objects."""

    def __init__(self) -> None:
        self.inventory = Inventory()
        self.inventory.load(nodes(), pods())
        self.ready = True
        self.queue_length = 2
        self._pods = [p for p in pods() if pod_server_key(p)]

    def snapshot(self) -> Snapshot:
        return self.inventory.snapshot()

    def placements(self) -> dict[str, dict[str, Any]]:
        out = {}
        for pod in self._pods:
            meta = pod["metadata"]
            out[pod_server_key(pod)] = {
                "site": meta["labels"].get(keys.SITE_LABEL),
                "cluster_id": None,
                "node": pod["spec"].get("nodeName"),
                "reason": "test placement",
                "state": "running" if pod["status"]["phase"] == "Running" else "pending",
                # what a careless tracker might keep: must not be shown
                "pod_spec": json.dumps(pod["spec"]),
            }
        return out
