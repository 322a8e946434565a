"""Prometheus metrics for GPU placement, served by JupyterHub at ``/hub/metrics``.

Everything lives in prometheus_client's default ``REGISTRY``, the one JupyterHub's own metrics
handler serves, so no extra endpoint or port is needed. Names follow JupyterHub: a namespace
prefix from ``JUPYTERHUB_METRICS_PREFIX`` (default ``jupyterhub``), then ``gpuburst_``, base
units, ``_total`` on counters.

The recording functions are called on the spawn path: they are O(1), take plain values and never
raise (a metrics bug must not fail a spawn); a failure is logged as a warning, with its traceback,
the first time each series fails, and at debug level after that. Capacity gauges are not pushed: a collector reads the
capacity tracker's inventory snapshot (an O(1), immutable view) when Prometheus scrapes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jupyter_gpuburst.core import keys

log = logging.getLogger(__name__)

# Same environment variable and default as jupyterhub.metrics, read the same way.
METRICS_PREFIX = os.getenv("JUPYTERHUB_METRICS_PREFIX", "jupyterhub")
SUBSYSTEM = "gpuburst"

SPAWN_OUTCOMES: tuple[str, ...] = ("success", "failure", "no_capacity", "cancelled")
# Site label for outcomes that never reached a site (no capacity anywhere, cancelled in queue).
NO_SITE = "none"

# A decision is an in-memory snapshot read plus the policy: microseconds to milliseconds.
DECISION_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    float("inf"),
)


def metric_name(suffix: str) -> str:
    """The full exposed name of one of our series, e.g. ``jupyterhub_gpuburst_gpus_free``."""
    return f"{METRICS_PREFIX}_{SUBSYSTEM}_{suffix}"


DECISION_SECONDS = Histogram(
    "placement_decision_duration_seconds",
    "Time to decide where a GPU server runs (inventory snapshot + placement policy)",
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
    buckets=DECISION_BUCKETS,
)
SPAWNS = Counter(
    "spawns",
    "GPU server spawns by the site they ended on and their outcome",
    ["site", "outcome"],
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
)
REDIRECTS = Counter(
    "redirects",
    "GPU servers re-placed after their pod could not be scheduled on the chosen site",
    ["from_site", "to_site"],
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
)
QUEUE_LENGTH = Gauge(
    "spawn_queue_length",
    "GPU spawns waiting for capacity in the fair queue",
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
)
POOL_PLACEHOLDERS = Gauge(
    "pool_placeholders",
    "Warm pool placeholder pods by site, profile and state (ready: placed, holding room and the image)",
    ["site", "profile", "state"],
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
)
POOL_GPU_SECONDS = Counter(
    "pool_gpu_seconds",
    "GPU-seconds held by warm pool placeholders (the pool's cost, counted for no user)",
    ["site", "profile"],
    namespace=METRICS_PREFIX,
    subsystem=SUBSYSTEM,
)

# Pre-create the series every deployment has, so dashboards and alerts see zeros, not gaps.
for _outcome in SPAWN_OUTCOMES:
    SPAWNS.labels(site=keys.ORIGIN_SITE, outcome=_outcome)
SPAWNS.labels(site=NO_SITE, outcome="no_capacity")
SPAWNS.labels(site=NO_SITE, outcome="cancelled")


_failed: set[str] = set()


def _record_failed(series: str, detail: str, *args: Any) -> None:
    """A series could not be recorded: warn once per series (with the traceback), then debug."""
    if series in _failed:
        log.debug("could not record " + detail, *args, exc_info=True)
        return
    _failed.add(series)
    log.warning("could not record " + detail + " (further failures of %s are logged at debug level)", *args, series, exc_info=True)


def _label(value: Any) -> str:
    return str(value) if value else NO_SITE


def observe_decision(seconds: float) -> None:
    """Record how long one placement decision took."""
    try:
        DECISION_SECONDS.observe(max(0.0, float(seconds)))
    except Exception:  # noqa: BLE001 - metrics never fail a spawn
        _record_failed("decision time", "a decision time of %r", seconds)


def record_spawn(site: str | None, outcome: str) -> None:
    """Count one finished spawn attempt: ``outcome`` is one of ``SPAWN_OUTCOMES``."""
    try:
        if outcome not in SPAWN_OUTCOMES:
            log.warning("unknown spawn outcome %r; counted as 'failure'", outcome)
            outcome = "failure"
        site_label = _label(site)
        if site_label != NO_SITE:
            # First spawn on a new donor: give it all outcomes at once, as for the origin.
            for other in SPAWN_OUTCOMES:
                SPAWNS.labels(site=site_label, outcome=other)
        SPAWNS.labels(site=site_label, outcome=outcome).inc()
    except Exception:  # noqa: BLE001
        _record_failed("spawns", "a spawn on %r (%r)", site, outcome)


def record_redirect(from_site: str | None, to_site: str | None) -> None:
    """Count one re-placement of a server whose pod could not be scheduled on ``from_site``."""
    try:
        REDIRECTS.labels(from_site=_label(from_site), to_site=_label(to_site)).inc()
    except Exception:  # noqa: BLE001
        _record_failed("redirects", "a redirect %r -> %r", from_site, to_site)


def set_queue_length(n: int) -> None:
    """Set the number of spawns waiting for capacity."""
    try:
        QUEUE_LENGTH.set(max(0, int(n)))
    except Exception:  # noqa: BLE001
        _record_failed("queue length", "a queue length of %r", n)


def record_pool(site: str, profile: str, ready: int, pending: int, gpu_seconds: float) -> None:
    """One warm pool's placeholders now, and the GPU-seconds they held since the last count."""
    try:
        POOL_PLACEHOLDERS.labels(site=site, profile=profile, state="ready").set(max(0, int(ready)))
        POOL_PLACEHOLDERS.labels(site=site, profile=profile, state="pending").set(max(0, int(pending)))
        POOL_GPU_SECONDS.labels(site=site, profile=profile).inc(max(0.0, float(gpu_seconds)))
    except Exception:  # noqa: BLE001
        _record_failed("pools", "warm pool %r/%r", site, profile)


# ---- capacity gauges, read at scrape time ---------------------------------------------------
SnapshotSource = Callable[[], Any]


class CapacityCollector(Collector):
    """Free, allocatable and requested GPUs per site and resource, and each site's readiness.

    Sources are callables returning an inventory ``Snapshot`` (or None while not yet synced).
    They are held weakly when they are bound methods, so a discarded tracker drops out by itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: list[Callable[[], SnapshotSource | None]] = []

    def add_source(self, source: SnapshotSource) -> None:
        ref: Callable[[], SnapshotSource | None]
        if hasattr(source, "__self__") and hasattr(source, "__func__"):
            ref = weakref.WeakMethod(source)  # type: ignore[arg-type]
        else:
            ref = lambda: source  # noqa: E731 - a plain function lives as long as its module
        with self._lock:
            if any(existing() == source for existing in self._sources):
                return
            self._sources.append(ref)

    def clear(self) -> None:
        with self._lock:
            self._sources.clear()

    def _callables(self) -> list[SnapshotSource]:
        with self._lock:
            self._sources = [ref for ref in self._sources if ref() is not None]
            found = [source for source in (ref() for ref in self._sources) if source is not None]
        # The hub's trackers, once the spawner has started them: no registration needed.
        capacity = sys.modules.get("jupyter_gpuburst.hub.capacity.tracker")
        tracker_class = getattr(capacity, "CapacityTracker", None)
        for tracker in list(getattr(tracker_class, "_instances", {}).values()):
            snapshot = getattr(tracker, "snapshot", None)
            if callable(snapshot) and snapshot not in found:
                found.append(snapshot)
        return found

    def snapshots(self) -> Iterator[Any]:
        for source in self._callables():
            try:
                snapshot = source()
            except Exception:  # noqa: BLE001 - a broken source must not break /hub/metrics
                log.warning("a GPU capacity source failed during a metrics scrape", exc_info=True)
                continue
            if snapshot is not None:
                yield snapshot

    def describe(self) -> Iterable[Any]:
        # Non-empty describe() with no samples: registration checks names without collecting.
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(metric_name("gpus_free"), "GPUs free for new servers, per site and resource", labels=["site", "resource"]),
            GaugeMetricFamily(
                metric_name("gpus_allocatable"),
                "GPUs a site offers in all (for a donor: what it grants through Liqo), per resource",
                labels=["site", "resource"],
            ),
            GaugeMetricFamily(metric_name("gpus_requested"), "GPUs held by pods, per site and resource", labels=["site", "resource"]),
            GaugeMetricFamily(
                metric_name("site_ready"),
                "1 when a site has at least one node that can take new pods (for a donor: peering healthy)",
                labels=["site", "kind"],
            ),
        ]

    def collect(self) -> Iterable[Any]:
        free, allocatable, requested, ready = self._families()
        seen: set[str] = set()
        for snapshot in self.snapshots():
            for name in sorted(snapshot.sites):
                if name in seen:  # two trackers on one API server would report the same site
                    continue
                seen.add(name)
                site = snapshot.sites[name]
                ready.add_metric([name, "donor" if site.is_donor else "origin"], 1.0 if site.ready else 0.0)
                for resource in sorted(set(site.allocatable) | set(site.requested)):
                    allocatable.add_metric([name, resource], float(site.allocatable.get(resource, 0)))
                    requested.add_metric([name, resource], float(site.requested.get(resource, 0)))
                    free.add_metric([name, resource], float(site.free.get(resource, 0)))
        return [free, allocatable, requested, ready]


CAPACITY = CapacityCollector()
REGISTRY.register(CAPACITY)


def add_capacity_source(source: SnapshotSource) -> None:
    """Have ``/hub/metrics`` report the capacity in ``source()`` (an inventory Snapshot)."""
    CAPACITY.add_source(source)
