"""`gpuburst bench chaos` with warm pools on: the pools, their faults, a student who cancels, and what placeholders leave.

With pools on (the default), each hub keeps placeholders on the origin and on the donor, so that
every spawn lands where a placeholder holds the room and takes it (preempting it, or having the
pool remove it first). The chaos phase then also has: every placeholder preempted at once while
spawns are placed (as a higher-priority workload of someone else would), twice; the donor lost
with its pool (the schedule's peering loss); the hub killed with its pools up (the schedule's hub
kills); and a share of students who press Cancel while being placed.

Placeholders are counted apart from servers: one is **orphaned** when no configured pool names it
(or a donor holds the twin of a placeholder the origin no longer has), and the placeholders of a
pool beyond its size are **leaked**.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import aiohttp

from jupyter_gpuburst.bench.spawn import DONOR, NAMESPACE, PROFILES
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.pools.manifests import NAME_PREFIX, priority_class
from jupyter_gpuburst.hub.pools.settings import WarmPools
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.faults import FaultSchedule, FaultStep
from jupyter_gpuburst.sim.federation import Federation

PROFILE = "gpu1"  # bench spawn's one GPU profile, which chaos starts
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
CANCEL_EVERY = 6  # one student in six presses Cancel while being placed


def pools_for(local_gpus: int, donor_gpus: int) -> list[dict[str, Any]]:
    """Half of each site's GPUs warm: spawns take placeholders' room, and the pools refill."""
    pools = [{"site": "origin", "profile": PROFILE, "count": max(1, local_gpus // 2)}]
    if donor_gpus:
        pools.append({"site": DONOR, "profile": PROFILE, "count": max(1, donor_gpus // 2)})
    return pools


def config_lines(pools: list[dict[str, Any]]) -> str:
    """Hub config lines to go before ``bench spawn``'s (whose ``install(c)`` comes first there):
    ``install(c)`` reads the pools and their profile as it runs, as an admin's config has them."""
    if not pools:
        return ""
    return f"c.KubeSpawner.profile_list = {PROFILES!r}\nc.WarmPools.pools = {pools!r}\nc.WarmPools.interval_seconds = 1.0\n"


def prepare_donors(fed: Federation) -> None:
    """The pools' class on each donor too, as an admin may have applied it (Liqo does not carry a
    pod's class to the donor, so it changes nothing there)."""
    settings = WarmPools()
    for donor in fed.donors.values():
        try:  # a create, not a list: a real control plane's node-agent cache holds no PriorityClass
            donor.store.create(PRIORITY_CLASSES, priority_class(settings.priority_class, settings.priority))
        except ApiError as exc:
            if exc.code != 409:
                raise


def with_pool_faults(schedule: FaultSchedule, span_s: float) -> FaultSchedule:
    """The chaos schedule, and every placeholder preempted at once twice while spawns are placed.

    Both come while the hub is up (after the API server's outage, before the second hub kill; see
    ``preempt_once_watched``): a pod removed while no hub runs is counted in the GPU-hours ledger
    up to the last hub's last write only, so the ledger check would measure the hub's downtime,
    not the pools. The first comes while a hub that stayed up through the outage may still be
    resuming its watch: its ledger hears of the deletions late and counts them by the pods'
    ``deletionTimestamp``.
    """
    t = max(span_s, 30.0) / 10
    steps = [*schedule.steps, FaultStep(5.4 * t, "pools_preempted"), FaultStep(6.3 * t, "pools_preempted")]
    return FaultSchedule(sorted(steps, key=lambda s: s.at_s))


def preempt_placeholders(fed: Federation) -> int:
    """Delete every placeholder on the origin at once, grace period 0, as a preemption does."""
    pods, _ = fed.origin.store.list("pods", NAMESPACE, label_selector=keys.POOL_LABEL)
    gone = 0
    for pod in pods:
        with contextlib.suppress(Exception):
            fed.origin.store.delete("pods", NAMESPACE, pod["metadata"]["name"], grace_period_seconds=0)
            gone += 1
    return gone


async def preempt_once_watched(fed: Federation, hub: Any, wait_s: float = 60.0) -> float:
    """``preempt_placeholders`` once the hub (``chaos.Hub``) is up and its capacity tracker has
    listed the pods; returns how long the preemption waited.

    The schedule puts the preemptions after the API server's outage, but a hub started again
    during the outage can come up seconds after them on a loaded machine, and a pod removed
    while no hub watches leaves no time of its own in the cluster: the ledger ends it at the
    previous hub's last write, and the check would measure the hub's downtime, not the pools.
    A hub that is up but whose watch is still resuming is not waited for: that is the case the
    ledger must count by the cluster's own times; and a hub killed after the preemption is not
    held off either: the ends it heard are on disk at once (``hub/accounting/ledger.py``)."""
    async with hub.restarting:
        return await _preempt_once_watched(fed, hub, wait_s)


async def _preempt_once_watched(fed: Federation, hub: Any, wait_s: float) -> float:
    started = time.monotonic()
    deadline = started + wait_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
                await asyncio.wait_for(hub.up.wait(), max(0.1, deadline - time.monotonic()))
                status, report = await hub.process.capacity(session)
                if status == 200 and isinstance(report, dict) and report.get("ready"):
                    break
            await asyncio.sleep(0.2)
    waited = time.monotonic() - started
    preempt_placeholders(fed)
    return waited


def placeholders_bound(lifetimes: Any) -> int:
    """Placeholders that held GPUs during the phase (``PodLifetimes`` records): the pools were up."""
    return sum(1 for r in lifetimes if str(r.get("name") or "").startswith(NAME_PREFIX) and r.get("bound") is not None)


def cancels(user_index: int) -> bool:
    return user_index % CANCEL_EVERY == CANCEL_EVERY - 1


def placeholder_counts(fed: Federation, pools: list[dict[str, Any]]) -> dict[str, int]:
    """Orphaned placeholders (no configured pool names them, or a donor twin without its origin
    pod) and leaked ones (beyond their pool's size), alive ones only."""
    sizes = {f"{p['site']}.{p['profile']}": int(p["count"]) for p in pools}
    pods, _ = fed.origin.store.list("pods", NAMESPACE, label_selector=keys.POOL_LABEL)
    alive = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    per_pool = Counter(p["metadata"]["labels"].get(keys.POOL_LABEL, "") for p in alive)
    orphaned = sum(n for name, n in per_pool.items() if name not in sizes)
    leaked = sum(max(0, n - sizes[name]) for name, n in per_pool.items() if name in sizes)
    origin_names = {p["metadata"]["name"] for p in pods}
    for donor_id, donor in fed.donors.items():
        remote_ns = fed.peerings[donor_id].remote_namespace(NAMESPACE)
        for pod in donor.store.list("pods", remote_ns)[0]:
            labels = pod["metadata"].get("labels") or {}
            if keys.POOL_LABEL in labels and pod["metadata"]["name"] not in origin_names:
                orphaned += 1
    return {"placeholders": len(alive), "orphaned": orphaned, "leaked": leaked}


async def cancel_while_placed(hub: Any, session: aiohttp.ClientSession, user: str, journey: Any, delay: float, deadline: float) -> Any:
    """Start, then press Cancel ``delay`` seconds later (the spawn page's button: JupyterHub's
    DELETE of the pending server); once the hub is back from any crash, nothing may be left."""
    start = asyncio.create_task(hub.process.request(session, "POST", f"/users/{user}/server", json={"profile": PROFILE}))
    journey.posts += 1
    journey.note("POST")
    await asyncio.sleep(delay)
    # the Cancel button is on the spawn page: the start is under way by then (or over)
    while not start.done() and time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            if not await _nothing_left(hub, session, user):
                break
        await asyncio.sleep(0.2)
    journey.note("Cancel")
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(hub.up.wait(), max(0.1, deadline - time.monotonic()))
            status, _ = await hub.process.request(session, "DELETE", f"/users/{user}/server")
            journey.note(f"DELETE HTTP {status}")
            if await _nothing_left(hub, session, user):
                break
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            journey.hub_gone += 1
        await asyncio.sleep(0.5)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(start, 5)
    if not start.done():
        start.cancel()
    journey.outcome = "cancelled"
    return journey


async def _nothing_left(hub: Any, session: aiohttp.ClientSession, user: str) -> bool:
    status, model = await hub.process.request(session, "GET", f"/users/{user}")
    return status == 200 and isinstance(model, dict) and "" not in (model.get("servers") or {})
