"""A GPU-hours ledger on a file with a clock the test moves, and the hub's pods it counts."""

from __future__ import annotations

import json

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.hub.accounting.ledger import UsageLedger
from jupyter_gpuburst.hub.accounting.store import UsageStore

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
DAY0 = 1_795_000_000.0 - (1_795_000_000.0 % 86400)  # a UTC midnight


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pod(
    name: str,
    user: str = "alice",
    *,
    node: str | None = "n1",
    resource: str = GPU,
    count: int = 1,
    uid: str | None = None,
    site: str = "origin",
    kernel: str | None = None,
    groups: tuple[str, ...] = ("students",),
    phase: str = "Running",
    profile: str = "gpu",
) -> dict:
    annotations = {keys.USER_ANNOTATION: user, keys.GROUPS_ANNOTATION: json.dumps(list(groups)), keys.PROFILE_ANNOTATION: profile}
    if kernel:
        annotations |= {keys.KERNEL_ANNOTATION: kernel, keys.SERVER_ANNOTATION: ""}
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {resource: str(count)}, "requests": {resource: str(count)}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "jhub",
            "uid": uid or f"uid-{name}",
            "labels": {keys.SITE_LABEL: site},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def ledger_at(path, clock: Clock, **kwargs) -> UsageLedger:
    inventory = Inventory()
    return UsageLedger(UsageStore(path), inventory.pod_requests, clock=clock, **kwargs)


def seconds(ledger: UsageLedger, **filters) -> float:
    return sum(r["gpu_seconds"] for r in ledger.usage_rows("2000-01-01", "2100-01-01", **filters))
