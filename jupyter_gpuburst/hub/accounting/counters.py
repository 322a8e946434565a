"""GPU-seconds counters at ``/hub/metrics``, read from the ledger when Prometheus scrapes.

``jupyterhub_gpuburst_gpu_seconds_total`` (and ``..._gpu_idle_seconds_total`` once an idle source
is wired) by site, GPU resource, mode and profile; with a ``user`` label only where the admin
turned ``GPUAccountingSettings.metrics_usernames`` on. The ledger's totals survive hub restarts,
so the counters never go back (Prometheus' ``rate()`` and ``increase()`` stay right).
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from jupyter_gpuburst.hub.metrics import metric_name

log = logging.getLogger(__name__)
LABELS = ("site", "resource", "mode", "profile")


class UsageCollector(Collector):
    """Reads every capacity tracker's ledger in this process at scrape time."""

    def __init__(self) -> None:
        self._extra: list[Any] = []

    def add(self, accounting: Any) -> None:
        """Also report ``accounting`` (one not attached to the hub's own trackers)."""
        if accounting not in self._extra:
            self._extra.append(accounting)

    def describe(self) -> Iterable[Any]:
        return self._families(with_users=False)

    def _families(self, with_users: bool) -> list[CounterMetricFamily]:
        labels = [*LABELS, "user"] if with_users else list(LABELS)
        return [
            CounterMetricFamily(
                metric_name("gpu_seconds"),
                "GPU-seconds held by the hub's servers and GPU kernels (one GPU or MIG slice for one second)",
                labels=labels,
            ),
            CounterMetricFamily(
                metric_name("gpu_idle_seconds"),
                "Of those, GPU-seconds held while the GPUs were idle (where an idle source is wired)",
                labels=labels,
            ),
        ]

    def collect(self) -> Iterable[Any]:
        accountings = _accountings() + [a for a in self._extra if a not in _accountings()]
        with_users = any(a.settings.metrics_usernames for a in accountings)
        held, idle = self._families(with_users)
        sums: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
        counts_idle = False
        for accounting in accountings:
            counts_idle = counts_idle or accounting.ledger.counts_idle
            try:
                totals = accounting.ledger.totals()
            except Exception:  # noqa: BLE001 - a broken ledger must not break /hub/metrics
                log.warning("could not read GPU usage for a metrics scrape", exc_info=True)
                continue
            for (user, profile, site, resource, mode), (gpu, was_idle) in totals.items():
                key = (site, resource, mode, profile, *((user,) if with_users else ()))
                sums[key][0] += gpu
                sums[key][1] += was_idle
        for key in sorted(sums):
            held.add_metric(list(key), sums[key][0])
            if counts_idle:
                idle.add_metric(list(key), sums[key][1])
        return [held, idle] if counts_idle else [held]


def _accountings() -> list[Any]:
    tracker_module = sys.modules.get("jupyter_gpuburst.hub.capacity.tracker")
    tracker_class = getattr(tracker_module, "CapacityTracker", None)
    found = []
    for tracker in list(getattr(tracker_class, "_instances", {}).values()):
        accounting = getattr(tracker, "accounting", None)
        if accounting is not None and accounting not in found:
            found.append(accounting)
    return found


USAGE = UsageCollector()
REGISTRY.register(USAGE)
