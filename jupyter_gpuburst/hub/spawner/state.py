"""What the hub database must hold at every moment of a spawn, so a hub crash loses nothing.

JupyterHub writes ``Spawner.get_state()`` to its database only after ``start()`` returns. A hub
killed between the placement decision and that moment restarts with no record of where the pod
was sent (the pod alone remembers). :func:`save_state` writes the state at once, the way
JupyterHub itself does (``orm_spawner.state = spawner.get_state()`` and a commit), through the
session the spawner's ORM object belongs to (``Spawner.db`` is deprecated since JupyterHub 5).

JupyterHub also stores new ``user_options`` before the spawner validates them; a refused set
would then be reused by the next plain spawn and refused again. :func:`restore_options` puts
back the last set that was accepted.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from jupyter_gpuburst.core import keys


def _session(orm_object: Any) -> Any:
    if orm_object is None:
        return None
    try:
        from sqlalchemy import inspect
        from sqlalchemy.exc import NoInspectionAvailable
    except ImportError:  # pragma: no cover - JupyterHub depends on SQLAlchemy
        return None
    try:
        return inspect(orm_object).session
    except NoInspectionAvailable:
        return None


def save_state(spawner: Any) -> bool:
    """Persist ``spawner.get_state()`` now; False when the spawner has no database row (tests)."""
    orm_spawner = getattr(spawner, "orm_spawner", None)
    session = _session(orm_spawner)
    if session is None:
        return False
    orm_spawner.state = spawner.get_state()
    session.commit()
    return True


# session -> the commit every spawner that saved in this event-loop turn waits for
_pending_commits: dict[Any, asyncio.Future] = {}


async def save_state_together(spawner: Any) -> bool:
    """:func:`save_state`, with one commit for every spawner that saves in the same loop turn.

    A commit of the hub's SQLite database is a synchronous fsync on the event loop (5 ms, up to
    25 ms on a busy disk). When 200 students press Start together, 200 commits one after the
    other hold the loop, and every spawn behind them, for seconds. Each spawner's state is put
    in the session at once; the commit runs on the next turn of the loop and covers all of
    them, and each caller returns only once it is done (or raises its error), so the state is
    still in the database before the caller goes on to create its pod.
    """
    orm_spawner = getattr(spawner, "orm_spawner", None)
    session = _session(orm_spawner)
    if session is None:
        return False
    orm_spawner.state = spawner.get_state()
    commit = _pending_commits.get(session)
    if commit is None:
        loop = asyncio.get_running_loop()
        commit = _pending_commits[session] = loop.create_future()
        loop.call_soon(_commit, session, commit)
    await asyncio.shield(commit)
    return True


def _commit(session: Any, done: asyncio.Future) -> None:
    if _pending_commits.get(session) is done:
        del _pending_commits[session]
    try:
        session.commit()
    except Exception as exc:  # noqa: BLE001 - every waiter sees the failure its own commit would have had
        done.set_exception(exc)
    else:
        done.set_result(None)


def restore_options(spawner: Any, saved: Mapping[str, Any] | None) -> None:
    """Put the last accepted ``user_options`` back in memory and in the hub database."""
    saved = copy.deepcopy(dict(saved or {}))
    spawner.user_options = copy.deepcopy(saved)
    orm_spawner = getattr(spawner, "orm_spawner", None)
    session = _session(orm_spawner)
    if session is None:
        return
    orm_spawner.user_options = saved
    session.commit()


def placement_from_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a pod placed by this product runs, from its own labels and annotations."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    site = labels.get(keys.SITE_LABEL)
    if not site:
        return None
    annotations = meta.get("annotations") or {}
    try:
        attempts = int(annotations.get(keys.ATTEMPTS_ANNOTATION, 1))
    except (TypeError, ValueError):
        attempts = 1
    return {
        "site": site,
        "cluster_id": labels.get(keys.CLUSTER_LABEL) or None,
        "node": (pod.get("spec") or {}).get("nodeName"),
        "reason": annotations.get(keys.REASON_ANNOTATION, ""),
        "attempts": attempts,
    }


def reconcile(saved: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The placement to keep for an adopted pod: the saved one, corrected by the pod's labels.

    The pod is the truth about where it runs; the saved state adds what the pod does not carry
    (resource, count, the decision's other fields).
    """
    actual = placement_from_pod(pod)
    if actual is None:
        return dict(saved) if saved else None
    merged = {**dict(saved or {})}
    for key in ("site", "cluster_id", "attempts"):
        merged[key] = actual[key]
    if actual["node"]:
        merged["node"] = actual["node"]
    if not merged.get("reason"):
        merged["reason"] = actual["reason"]
    return merged


async def delete_if_it_appears(
    tracker: Any,
    namespace: str,
    name: str,
    unwanted: Any,
    delete: Any,
    window_s: float = 60.0,
) -> bool:
    """Delete the pod ``namespace/name`` if it shows up within ``window_s`` while ``unwanted()``.

    A create the client gave up on (KubeSpawner's per-request timeout) can still land on a slow
    API server after JupyterHub cleaned up the failed spawn: that pod belongs to no server and
    would hold its GPU for good. Every such pod is deleted until the window ends or the server
    is started again. Returns True when one was deleted.
    """
    import time

    deadline = time.monotonic() + window_s
    deleted = False
    while unwanted():
        pod = tracker.pod(namespace, name)
        if pod is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            await delete()
            deleted = True
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await tracker.wait_pod_change(namespace, name, min(1.0, remaining))
    return deleted
