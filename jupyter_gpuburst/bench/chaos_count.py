"""What the chaos benchmark counts once a phase has settled: every count comes from what exists.

Pods from the sites' API servers (origin and donors, the emulator's stores or the real control
plane's informer caches), servers and their saved state from the hub's database, reservations
from the hub's capacity API; never from what the hub reports about its own spawns. See
``chaos``'s module docstring for what each count means.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from jupyter_gpuburst.bench import chaos_pools
from jupyter_gpuburst.bench.spawn import NAMESPACE
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.federation import Federation

USER_LABEL = "hub.jupyter.org/username"
SERVER_COMPONENT = "singleuser-server"


def hub_servers(workdir: Path) -> dict[str, dict[str, Any]]:
    """Per user: whether the hub's database has a server, and the spawner's saved state."""
    db = sqlite3.connect(f"file:{workdir / 'jupyterhub.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute(
            "SELECT users.name, spawners.name, spawners.server_id, spawners.state FROM spawners JOIN users ON users.id = spawners.user_id"
        ).fetchall()
    finally:
        db.close()
    out = {}
    for user, name, server_id, state in rows:
        if name:
            continue
        saved = json.loads(state) if state else {}
        out[user] = {"server": server_id is not None, "state": saved or {}}
    return out


def user_pods(fed: Federation) -> tuple[dict[str, list[dict[str, Any]]], int, int]:
    """Origin user-server pods by user; donor twins beyond one per origin pod; donor orphans.

    A donor's twin of an offloaded pod has the origin pod's name in Liqo's remapped namespace.
    """
    by_user: dict[str, list[dict[str, Any]]] = {}
    origin_names = set()
    for pod in fed.origin.store.list("pods", NAMESPACE)[0]:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("component") != SERVER_COMPONENT:
            continue
        by_user.setdefault(labels.get(USER_LABEL, "?"), []).append(pod)
        origin_names.add(pod["metadata"]["name"])
    twins: Counter[str] = Counter()
    donor_orphans = 0
    for donor_id, donor in fed.donors.items():
        remote_ns = fed.peerings[donor_id].remote_namespace(NAMESPACE)
        for pod in donor.store.list("pods", remote_ns)[0]:
            if (pod["metadata"].get("labels") or {}).get("component") != SERVER_COMPONENT:
                continue
            name = pod["metadata"]["name"]
            if name not in origin_names:
                donor_orphans += 1
            twins[name] += 1
    extra_twins = sum(n - 1 for n in twins.values() if n > 1)
    return by_user, extra_twins, donor_orphans


def _running_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


async def leaked_reservations(hub: Any, session: aiohttp.ClientSession) -> int:
    status, report = await hub.process.capacity(session)
    if status != 200 or not isinstance(report, dict):
        raise RuntimeError(f"capacity API: HTTP {status}")
    if "reservations" not in report:
        raise RuntimeError("the capacity API does not report reservations")
    return int(report["reservations"])


async def settle(fed: Federation, timeout: float = 60.0) -> None:
    """Wait until no pod is pending or terminating, so what is counted is what stays."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for cluster in fed.clusters.values():
            for pod in cluster.store.list("pods")[0]:
                if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") == "Pending":
                    busy = True
        if not busy:
            return
        await asyncio.sleep(0.5)


def complaints_about(log_lines: list[str], user: str, most: int = 6) -> list[str]:
    """The hub's last warning and error lines that name ``user``, each cut to 240 characters."""
    name = re.compile(rf"\b{re.escape(user)}\b")
    named = [line[:240] for line in log_lines if line.startswith(("[W ", "[E ", "[C ")) and name.search(line)]
    return named[-most:]


async def count(
    fed: Federation, hub: Any, session: aiohttp.ClientSession, journeys: list[Any], pools: list[dict[str, Any]]
) -> dict[str, Any]:
    await settle(fed)
    servers = hub_servers(hub.process.workdir)
    pods, extra_copies, donor_orphans = user_pods(fed)
    ready = refused = cancelled = lost = duplicated = orphaned = wrong = 0
    reasons: Counter[str] = Counter()
    lost_detail: list[dict[str, Any]] = []
    hub_log = hub.process.log_path.read_text(errors="replace").splitlines() if hub.process.log_path.exists() else []

    def why_lost(j: Any, server: dict[str, Any], mine: list[dict[str, Any]]) -> None:
        # what a lost student saw and what was left, to tell a spawner bug from a harness one;
        # the hub's warnings and errors about them, since a failed run's state dir is often gone
        lost_detail.append(
            {
                "user": j.user,
                "outcome": j.outcome,
                "message": (j.message or "")[:160],
                "hub_has_server": bool(server["server"]),
                "pods": [f"{(p.get('status') or {}).get('phase')}{' ready' if _running_ready(p) else ''}" for p in mine],
                "trace": j.trace,
                "hub_log": complaints_about(hub_log, j.user),
            }
        )

    for j in journeys:
        mine = pods.get(j.user, [])
        server = servers.get(j.user, {"server": False, "state": {}})
        duplicated += max(0, len(mine) - 1)
        if server["server"]:
            saved = (server["state"] or {}).get("gpuburst") or {}
            live = [p for p in mine if _running_ready(p)]
            if len(live) == 1 and j.outcome == "ready":
                site = (live[0]["metadata"].get("labels") or {}).get(keys.SITE_LABEL)
                if saved.get("site") == site:
                    ready += 1
                else:
                    wrong += 1
                    lost += 1
                    why_lost(j, server, mine)
            else:
                lost += 1
                why_lost(j, server, mine)
        else:
            orphaned += len(mine)
            if j.outcome == "refused" and not mine:
                refused += 1
                reasons[j.message] += 1
            elif j.outcome == "cancelled" and not mine:
                cancelled += 1
            else:
                lost += 1
                why_lost(j, server, mine)
    known = {j.user for j in journeys}
    orphaned += sum(len(p) for user, p in pods.items() if user not in known)
    orphaned += donor_orphans
    placeholders = chaos_pools.placeholder_counts(fed, pools)
    return {
        "ready": ready,
        "refused": refused,
        "cancelled": cancelled,
        "refused_reasons": dict(reasons.most_common(5)),
        "lost": lost,
        "duplicated": duplicated + extra_copies,
        "orphaned": orphaned + placeholders["orphaned"],
        "leaked_reservations": await leaked_reservations(hub, session),
        "leaked_placeholders": placeholders["leaked"],
        "placeholders": placeholders["placeholders"],
        "wrong_placement": wrong,
        "lost_detail": lost_detail[:10],
        "unclear_refusals": [j.message[:160] for j in journeys if j.outcome == "unclear"][:3],
    }
