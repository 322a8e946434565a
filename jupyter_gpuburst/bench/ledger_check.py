"""The chaos benchmark's accounting check: the hub's GPU-hours ledger against the pods' real lives.

The real lifetimes come from the emulated origin API server's own store, watched in-process (the
hub cannot see this watch, and nothing it counts comes from it): each pod's GPUs are held from
the moment it is bound until it is removed or has finished. The ledger is the hub's SQLite file,
read after the run: per pod, its GPU-seconds on disk plus the time since it was last written
(what the hub counts for a pod still running). Each pod must agree within ``tolerance_s``.

Why ``TOLERANCE_S`` is 5 s, the sum of two parts:
- ``STAMP_S``, 1 s: the cluster stamps whole seconds, and an end or a binding the hub heard late
  (a watch resuming after an outage, a restarted hub) is counted from the middle of its stamped
  second, within half a second of the real moment: two stamped ends are within 1 s. The
  offloaded pod's removal after the ``deletionTimestamp`` the hub counts to (Liqo first removes
  its donor twin) adds tens of milliseconds.
- ``HEARING_S``, 4 s: an event heard live is counted when the hub hears it, and the real life
  here is taken when this watch, in the process that serves the API, hears it. A removal has no
  stamp of its own, so a hub starved of CPU counts it as late as it hears it: beside eight busy
  loops on 2 cores, a GPU kernel's pod the hub deleted at 06:16:16.17 was counted to 06:16:18.06,
  1.84 s more than it lived, and in a fresh clone's suite 7 of 27 pods were off by 1-3.5 s. On an
  idle machine runs came within 0.11-0.22 s, on either control plane; one at load 22 reached
  1.33 s (benchmarks/README.md). ``worst_error_s`` reports how close a run came.

A defect of the ledger shows as tens of seconds (a restart's downtime, a namespace not counted
after a restart: 40 s), well over the tolerance.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core.inventory import Inventory

LEDGER_FILE = "gpuburst-usage.sqlite"
STAMP_S = 1.0  # see the module docstring
HEARING_S = 4.0
TOLERANCE_S = STAMP_S + HEARING_S


class PodLifetimes:
    """Bound and ended wall-clock times of every GPU pod in some namespaces of a store."""

    def __init__(self, store: Any, *namespaces: str) -> None:
        self.store = store
        self.namespaces = namespaces
        self.pods: dict[str, dict[str, Any]] = {}
        self._requests = Inventory().pod_requests
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(namespace)) for namespace in self.namespaces]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, namespace: str) -> None:
        version: str | None = None
        while True:
            watch = self.store.watch("pods", namespace, resource_version=version, read_only=True)
            try:
                async for etype, pod in watch:
                    version = (pod.get("metadata") or {}).get("resourceVersion") or version
                    self._note(etype, pod, time.time())
            finally:
                watch.close()
            await asyncio.sleep(0.05)  # the store closed its watches (an API server restart)

    def _note(self, etype: str, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        record = self.pods.get(uid)
        if record is None:
            requests = self._requests(pod)
            if not requests:
                return
            record = self.pods[uid] = {"name": meta.get("name"), "count": sum(requests.values()), "bound": None, "ended": None}
        if record["bound"] is None and (pod.get("spec") or {}).get("nodeName"):
            record["bound"] = now
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if record["ended"] is None and record["bound"] is not None and (etype == "DELETED" or finished):
            record["ended"] = now


def ledger_sessions(path: Path, now: float) -> dict[str, tuple[float, float, float | None]]:
    """Per pod uid, as the hub counts it at ``now``: (GPU-seconds, started, ended), ended None
    while open. One read of the hub's file for both the figures and a failure's detail."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute(
            "SELECT s.uid, s.count, s.started, s.counted_until, s.ended, COALESCE(SUM(c.gpu_seconds), 0) FROM sessions s "
            "LEFT JOIN charges c ON c.uid = s.uid GROUP BY s.uid"
        ).fetchall()
    finally:
        db.close()
    return {
        uid: (charged + (0.0 if ended is not None else max(0.0, now - until) * count), started, ended)
        for uid, count, started, until, ended, charged in rows
    }


def _clock(t: float | None) -> str | None:
    """A wall-clock time as the hub's log writes it (UTC, to the millisecond), to find it there."""
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def compare(lifetimes: PodLifetimes, ledger: Path, tolerance_s: float = TOLERANCE_S) -> dict[str, Any]:
    """How far the ledger is from the pods' real GPU-seconds, pod by pod; for each pod off by
    more, both spans, at the hub log's clock."""
    now = time.time()
    sessions = ledger_sessions(ledger, now) if ledger.exists() else {}
    counted = {uid: seconds for uid, (seconds, _, _) in sessions.items()}
    worst = 0.0
    off: list[dict[str, Any]] = []
    missing = 0
    real_total = 0.0
    for uid, record in lifetimes.pods.items():
        if record["bound"] is None:
            continue
        real = ((record["ended"] or now) - record["bound"]) * record["count"]
        real_total += real
        # a pod bound a moment ago may not be on disk yet (the hub writes half a second later)
        error = abs(counted.get(uid, 0.0) - real) / record["count"]
        if uid not in counted and error > tolerance_s:
            missing += 1
        worst = max(worst, error)
        if error > tolerance_s:
            _, started, ended = sessions.get(uid, (None, None, None))
            off.append(
                {
                    "pod": record["name"],
                    "real_s": round(real, 2),
                    "ledger_s": round(counted[uid], 2) if uid in counted else None,
                    "real": [_clock(record["bound"]), _clock(record["ended"])],
                    "ledger": [_clock(started), _clock(ended)],
                }
            )
    extra = len(set(counted) - set(lifetimes.pods))
    return {
        "pods": sum(1 for r in lifetimes.pods.values() if r["bound"] is not None),
        "real_gpu_seconds": round(real_total, 1),
        "ledger_gpu_seconds": round(sum(counted.values()), 1),
        "worst_error_s": round(worst, 3),
        "off_by_more": len(off),
        "missing": missing,
        "counted_but_never_bound": extra,
        "detail": off[:5],
    }
