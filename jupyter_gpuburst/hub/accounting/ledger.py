"""GPU-seconds per pod, from the capacity watch's pod events: no Kubernetes reads of its own.

A pod holds GPUs from the moment it is bound to a node until it is deleted or has finished
(Succeeded/Failed: the kubelet has freed its devices). The tracker hands every pod event here
(``pod_event``). An event seen on time is counted at the hub's clock, which is finer than the
cluster's stamps (to the second); one that reaches the hub late (a hub that started again, a
watch that was resuming after an API server outage, a relist) is counted at the cluster's own
time: a binding from the pod's ``PodScheduled`` condition, an end from its containers'
``terminated.finishedAt`` or, for a deleted pod, its ``deletionTimestamp``.

Open sessions are counted on disk every ``flush_seconds`` and when they end (see ``store``), so a
hub that is killed and starts again resumes each pod where it was counted up to, and a pod that
finished while the hub was down is ended at its containers' end. A pod that was removed while no
hub watched has left no time of its own in the cluster: it is ended where the previous hub was
last alive, so nothing is counted twice, and at most that hub's downtime of such a pod goes
uncounted.

New sessions wait ``write_delay`` to be written together, but an end is written at once (with
whatever else is pending, at the loop's next turn): a hub killed before writing a binding leaves
a pod the next hub still lists, bound at its scheduler's time, but one killed before writing an
end leaves a pod that is gone, and the next hub could only end it where this one last wrote,
up to a heartbeat before (a placeholder preempted, or a student's server stopped, just before
the hub was killed was counted seconds short).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.accounting.store import USE_COLUMNS, Session, UsageStore, split_by_day

SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
SERVER_TARGET = "server"
POOL_TARGET = "pool"  # the mode of a warm pool placeholder's sessions
POOL_USER = "(warm pool)"  # whom reports by user show them under: no student, no budget
NO_PROFILE = "(none)"
# capacity samples are kept a week (the page shows the last 24 hours)
SAMPLES_KEPT_S = 7 * 86400.0
# the cluster stamps bindings and ends to the second, and its times here are that second's
# middle: one the hub hears after that second is over (half a second past its middle) reached
# it late, and the cluster's second says better when it happened than the hub's clock
LATE_S = 0.5
UNIT_MEMORY_TTL_S = 600.0

# (user, server name, target: "server" or the GPU kernel's record id) -> the wall-clock time
# since which its GPUs have been idle, or None when busy or unknown
IdleSource = Callable[[str, str, str], "float | None"]
RequestsOf = Callable[[Mapping[str, Any]], Mapping[str, int]]


class UsageLedger:
    """GPU-seconds held (and held idle, where an idle source says) by every pod the hub placed."""

    def __init__(
        self,
        store: UsageStore,
        requests_of: RequestsOf,
        *,
        clock: Callable[[], float] = time.time,
        idle_source: IdleSource | None = None,
        flush_seconds: float = 60.0,
        write_delay: float = 0.5,
        heartbeat_seconds: float = 5.0,
        snapshot: Callable[[], Any] | None = None,
        sample_seconds: float = 300.0,
        log: logging.Logger | None = None,
    ) -> None:
        self.store = store
        self.requests_of = requests_of
        self.clock = clock
        self.idle_source = idle_source
        self.flush_seconds = flush_seconds
        self.write_delay = write_delay
        self.heartbeat_seconds = heartbeat_seconds
        # the capacity snapshot, sampled for the capacity page's 24-hour chart
        self.snapshot = snapshot
        self.sample_seconds = sample_seconds
        self.log = log or logging.getLogger(__name__)
        # open sessions by pod (namespace/name), each a list: one per GPU resource it requests
        self._open: dict[str, list[Session]] = {}
        # pods seen before they were bound, and when: their binding came after that
        self._waiting: dict[str, float] = {}
        self._task: asyncio.Task | None = None
        # sessions open on disk from before this hub started: resumed when their pod is seen
        self._resumable: dict[str, Session] = store.open_sessions()
        # their uids by pod uid (a pod asking for two GPU resources has two sessions)
        self._resumable_of: dict[str, list[str]] = {}
        for session_uid in self._resumable:
            self._resumable_of.setdefault(session_uid.split("/", 1)[0], []).append(session_uid)
        # the watch's first list is in (``loaded``)
        self._listed = False
        # when the previous hub was last alive (its last write): where pods gone meanwhile end
        self._last_alive = store.alive_until()
        # what is not on disk yet: written together shortly after, off the watch event's path
        self._new: list[Session] = []
        self._pending: list[tuple[Session, float, float | None, float | None]] = []
        # sessions whose use figures changed since the last write, by session uid
        self._used: dict[str, Session] = {}
        # GPU memory per unit of each resource as sessions measured it: (when read, bytes)
        self._unit_memory: dict[str, tuple[float, float | None]] = {}
        self._write_handle: asyncio.Handle | None = None
        self._write_soon = False  # the handle is for the loop's next turn (an end is pending)

    # ---- the tracker's pod events -------------------------------------------------------------
    def pod_event(self, event_type: str, key: str, pod: Mapping[str, Any] | None) -> None:
        """``pod``: the hub's own pod (a server's, a kernel's, a warm pool's placeholder) as last
        seen, None when it is not the hub's; for a DELETED event, the pod as it was removed."""
        sessions = self._open.get(key)
        if pod is None or event_type == "DELETED" or _finished(pod):
            self._waiting.pop(key, None)
            if sessions is not None:
                self._end(key, sessions, pod)
            elif pod is not None and not self._listed:
                self._end_resumable(pod)
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or key)
        adopted = False
        if sessions is not None:
            if sessions[0].extra.get("pod_uid") == uid and sessions[0].extra.get("target") == _target(pod):
                return  # the common case: a pod already counted changed (status, annotations)
            # a new pod of the same name, or a pre-started kernel a student adopted: the pool's
            # time ends here and the student's starts
            adopted = sessions[0].extra.get("pod_uid") == uid
            self._end(key, sessions)
        if not (pod.get("spec") or {}).get("nodeName"):
            self._waiting.setdefault(key, self.clock())
            return
        now = self.clock()
        scheduled = _scheduled_at(pod)
        seen_unbound = self._waiting.pop(key, None)
        if scheduled is not None and seen_unbound is not None and seen_unbound > scheduled + LATE_S:
            # seen unbound only after the scheduler's second had passed: a watch catching up
            # replayed the pod's pending state after the fact, which says nothing of the moment
            seen_unbound = None
        started = now
        if scheduled is not None and not adopted and (seen_unbound is None or now - scheduled > LATE_S):
            # first seen bound (the hub started again), or the binding reached us late (a
            # dropped watch, a relist): the scheduler's own time, which is to the second, but
            # never before the pod was seen unbound
            started = min(now, max(scheduled, seen_unbound or scheduled))
        opened = [
            self._open_session(key, uid, pod, resource, count, started)
            for resource, count in sorted(self.requests_of(pod).items())
            if count > 0
        ]
        if opened:
            self._open[key] = opened

    def _open_session(self, key: str, uid: str, pod: Mapping[str, Any], resource: str, count: int, started: float) -> Session:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        kernel = annotations.get(keys.KERNEL_ANNOTATION)
        server_name = annotations.get(keys.SERVER_ANNOTATION if kernel else SERVERNAME_ANNOTATION, "") or ""
        # a pod that asks for two GPU resources (rare) is two sessions
        resources = self.requests_of(pod)
        session_uid = uid if len(resources) == 1 else f"{uid}/{resource}"
        pool = labels.get(keys.POOL_LABEL)
        if not pool and annotations.get(keys.PRESTARTED_ANNOTATION):
            session_uid += "/adopted"  # the same pod's time as the pool's is a session of its own
        extra = {"pod_uid": uid, "server_name": server_name, "target": _target(pod)}
        known = self._resumable.pop(session_uid, None)
        if known is not None:
            # seen before this hub started (or ended at the first list while its namespace was
            # not yet known to be the hub's): it held its GPUs all along, counted on from there
            known.ended = None
            known.extra = extra
            return known
        if pool:
            # a warm pool's placeholder: its GPUs are the pool's cost, nobody's usage or budget
            owner, user, groups, mode = f"{POOL_TARGET}/{pool}", POOL_USER, (), POOL_TARGET
            profile, site = labels.get(keys.POOL_PROFILE_LABEL), labels.get(keys.POOL_SITE_LABEL)
        else:
            owner, mode = _owner_key(annotations), "kernel" if kernel else "server"
            user = annotations.get(keys.USER_ANNOTATION) or annotations.get("hub.jupyter.org/username") or ""
            groups = tuple(_groups(annotations.get(keys.GROUPS_ANNOTATION)))
            profile, site = annotations.get(keys.PROFILE_ANNOTATION), labels.get(keys.SITE_LABEL)
        session = Session(
            uid=session_uid,
            pod=key,
            key=owner,
            user=user,
            groups=groups,
            profile=profile or NO_PROFILE,
            site=site or keys.ORIGIN_SITE,
            resource=resource,
            count=int(count),
            mode=mode,
            started=started,
            counted_until=started,
            extra=extra,
        )
        self._new.append(session)
        self._schedule_write()
        return session

    def _end(self, key: str, sessions: list[Session], pod: Mapping[str, Any] | None = None) -> None:
        """End ``key``'s sessions: now, or when the cluster says ``pod`` ended if we hear it late."""
        self._open.pop(key, None)
        now = self.clock()
        for s in sessions:
            end = _end_time(pod, now, s.counted_until)
            self._pending.append((s, end, self._idle_since(s), end))
        self._schedule_write(soon=True)

    def _end_resumable(self, pod: Mapping[str, Any]) -> None:
        """A pod counted by the previous hub that finished (or went) while no hub watched: its
        sessions end when its containers did, not where that hub was last alive."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        sessions = [s for u in self._resumable_of.pop(uid, ()) if (s := self._resumable.pop(u, None)) is not None]
        if not sessions:
            return
        now = self.clock()
        for session in sessions:
            end = _end_time(pod, now, session.counted_until, late=True)
            self._pending.append((session, end, None, end))
        self._schedule_write(soon=True)

    def _schedule_write(self, soon: bool = False) -> None:
        """Write soon, in one transaction with whatever else changed meanwhile: a commit on
        every binding would cost each watch event more than the inventory's whole update.
        ``soon``: at the loop's next turn (an end: see the module docstring); the events of one
        burst (a pool's placeholders preempted together) still share the commit."""
        if self._write_handle is not None and (self._write_soon or not soon):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write()  # no loop (a script, a test): at once
            return
        if self._write_handle is not None:
            self._write_handle.cancel()
        self._write_soon = soon
        self._write_handle = loop.call_soon(self.write) if soon else loop.call_later(self.write_delay, self.write)

    def write(self) -> None:
        """Put what changed on disk, with the time this hub was last alive."""
        if self._write_handle is not None:
            self._write_handle.cancel()
            self._write_handle = None
            self._write_soon = False
        new, pending, used = self._new, self._pending, self._used
        self._new, self._pending, self._used = [], [], {}
        try:
            self.store.save(new, pending, alive_until=self.clock(), used=used.values())
        except Exception:  # a full disk must not stop the watch: tried again at the next write
            self.log.exception("Could not write GPU usage to %s", self.store.path)
            self._new, self._pending, self._used = new + self._new, pending + self._pending, used | self._used

    def _idle_since(self, session: Session) -> float | None:
        if self.idle_source is None:
            return None
        try:
            return self.idle_source(session.user, session.extra.get("server_name", ""), session.extra.get("target", SERVER_TARGET))
        except Exception:  # noqa: BLE001 - an idle source that fails counts as not knowing
            self.log.warning("The GPU idle source failed; counting as held", exc_info=True)
            return None

    # ---- what sessions used of what they held (right-sizing) --------------------------------------
    def record_use(self, user: str, server_name: str, target: str, figures: Mapping[str, Any]) -> int:
        """Fold one report's figures (``peak_memory_bytes``, ``memory_total_bytes``,
        ``peak_utilization``, ``utilization_sum``, ``utilization_samples``, validated by the
        caller) into the open sessions of that server (``target`` "server") or GPU kernel
        (its record id); written with the next write. Returns how many sessions took them."""
        took = 0
        for session in self.open_sessions():
            extra = session.extra
            if session.user != user or extra.get("server_name", "") != server_name or extra.get("target") != target:
                continue
            session.use.add(
                figures.get("peak_memory_bytes"),
                figures.get("memory_total_bytes"),
                figures.get("peak_utilization"),
                float(figures.get("utilization_sum") or 0.0),
                int(figures.get("utilization_samples") or 0),
            )
            self._used[session.uid] = session
            took += 1
        if took:
            self._schedule_write()
        return took

    def measured_sessions(self, user: str | None = None, since: float | None = None, limit: int | None = None) -> list[Session]:
        """Sessions whose GPU memory use is known, latest first (open ones with their figures
        as of now): ``user``'s only, or those that ran after ``since``, at most ``limit``."""
        if self._new or self._pending or self._used:
            self.write()  # only then: the launcher asks every few seconds, and a write is a commit
        return self.store.measured_sessions(user, since, limit)

    def unit_memory(self, resource: str) -> float | None:
        """The least GPU memory one unit of ``resource`` measured in any session (bytes), or
        None; kept ``UNIT_MEMORY_TTL_S``, since it reads every session of that resource."""
        now = self.clock()
        known = self._unit_memory.get(resource)
        if known is None or now - known[0] > UNIT_MEMORY_TTL_S:
            known = self._unit_memory[resource] = (now, self.store.unit_memory(resource))
        return known[1]

    # ---- after the first list, and periodically ------------------------------------------------
    def loaded(self) -> None:
        """The watch's first list is in: end the sessions of pods that went away meanwhile, at
        the point they were counted up to (when the hub last saw them)."""
        # kept resumable: a pod of a namespace the hub learns is its own only later counts on
        self._listed = True
        self._resumable_of.clear()
        gone = list(self._resumable.values())
        if gone:
            self.log.info("%d GPU session(s) ended while the hub was away", len(gone))
            for session in gone:
                # alive at the previous hub's last write at the latest; not after
                end = max(session.counted_until, min(self._last_alive or 0.0, self.clock()))
                self._pending.append((session, end, None, end))
        self.write()

    def flush(self) -> None:
        """Count every open session up to now."""
        now = self.clock()
        self._pending.extend((s, now, self._idle_since(s), None) for sessions in self._open.values() for s in sessions)
        self.write()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="gpuburst-accounting")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.flush()

    def capacity_now(self) -> list[tuple[float, str, str, int, int, int, int | None]]:
        """Each site's GPUs now, per resource: (time, site, resource, total, in use (bound pods),
        reserved (spawns in flight), held idle (None without an idle source)); empty without a
        capacity snapshot."""
        snapshot = self.snapshot() if self.snapshot is not None else None
        if snapshot is None:
            return []
        now = self.clock()
        idle = self._idle_now()
        rows = []
        for name, site in snapshot.sites.items():
            for resource in sorted(set(site.allocatable) | set(site.requested) | set(site.reserved)):
                totals = site.total(resource)
                held_idle = None if idle is None else idle.get((name, resource), 0)
                rows.append((now, name, resource, totals.allocatable, totals.requested, totals.reserved, held_idle))
        return rows

    def _idle_now(self) -> dict[tuple[str, str], int] | None:
        """GPUs held idle now per (site, resource), by the idle source; None without one."""
        if self.idle_source is None:
            return None
        out: dict[tuple[str, str], int] = {}
        for session in self.open_sessions():
            if self._idle_since(session) is not None:
                out[(session.site, session.resource)] = out.get((session.site, session.resource), 0) + session.count
        return out

    def sample(self) -> None:
        """Keep each site's GPUs now as a point of the capacity page's chart."""
        rows = self.capacity_now()
        if not rows:
            return
        try:
            self.store.add_samples(rows, keep_after=rows[0][0] - SAMPLES_KEPT_S)
        except Exception:  # noqa: BLE001 - a chart point is not worth failing anything for
            self.log.warning("Could not keep a GPU capacity sample", exc_info=True)

    async def _run(self) -> None:
        last_flush = last_sample = self.clock()
        self.sample()
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            if self.clock() - last_sample >= self.sample_seconds:
                last_sample = self.clock()
                self.sample()
            if self.clock() - last_flush >= self.flush_seconds:
                last_flush = self.clock()
                self.flush()
            else:
                self.write()  # what is pending, and that this hub is alive

    # ---- reading -----------------------------------------------------------------------------
    def open_sessions(self) -> list[Session]:
        return [s for sessions in self._open.values() for s in sessions]

    def usage_rows(self, first_day: str, last_day: str, user: str | None = None, group: str | None = None) -> list[dict[str, Any]]:
        """GPU-seconds per session and UTC day in ``[first_day, last_day]``, open sessions
        counted up to now; only ``user``'s or ``group``'s, if given."""
        self.write()
        rows = self.store.usage_rows(first_day, last_day, user, group)
        now = self.clock()
        for session in self.open_sessions():
            if (user is not None and session.user != user) or (group is not None and group not in session.groups):
                continue
            idle_since = self._idle_since(session)
            for day, a, b in split_by_day(session.counted_until, now):
                if first_day <= day <= last_day:
                    idle = 0.0 if idle_since is None else max(0.0, b - max(a, idle_since))
                    rows.append(
                        {
                            "uid": session.uid,
                            "user": session.user,
                            "groups": session.groups,
                            "profile": session.profile,
                            "site": session.site,
                            "resource": session.resource,
                            "count": session.count,
                            "mode": session.mode,
                            "key": session.key,
                            "started": session.started,
                            "ended": None,
                            "day": day,
                            "gpu_seconds": (b - a) * session.count,
                            "idle_seconds": idle * session.count,
                            **dict(zip(USE_COLUMNS, session.use.row(), strict=True)),
                        }
                    )
        return rows

    def totals(self) -> dict[tuple[str, str, str, str, str], tuple[float, float]]:
        """All-time (GPU-seconds, idle GPU-seconds) per (user, profile, site, resource, mode),
        open sessions counted up to now: counters that only grow, across hub restarts."""
        self.write()
        out = {tuple(row[:5]): (row[5] or 0.0, row[6] or 0.0) for row in self.store.totals()}
        now = self.clock()
        for session in self.open_sessions():
            key = (session.user, session.profile, session.site, session.resource, session.mode)
            held = max(0.0, now - session.counted_until)
            idle_since = self._idle_since(session)
            idle = 0.0 if idle_since is None else max(0.0, now - max(session.counted_until, idle_since))
            gpu, was_idle = out.get(key, (0.0, 0.0))
            out[key] = (gpu + held * session.count, was_idle + idle * session.count)
        return out

    @property
    def counts_idle(self) -> bool:
        return self.idle_source is not None


def _target(pod: Mapping[str, Any]) -> str:
    """Whose a pod's GPU time is: its pool's, a GPU kernel's (its record id) or a server's."""
    meta = pod.get("metadata") or {}
    if keys.POOL_LABEL in (meta.get("labels") or {}):
        return POOL_TARGET
    return (meta.get("annotations") or {}).get(keys.KERNEL_ANNOTATION) or SERVER_TARGET


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler bound the pod, from its PodScheduled condition (or its start time)."""
    status = pod.get("status") or {}
    stamps = [
        c.get("lastTransitionTime") for c in status.get("conditions") or [] if c.get("type") == "PodScheduled" and c.get("status") == "True"
    ]
    stamps.append(status.get("startTime"))
    for stamp in stamps:
        when = _when(stamp)
        if when is not None:
            return when
    return None


def _ended_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod stopped holding its GPUs, by the cluster's own stamps: the last of its
    containers' ``terminated.finishedAt`` once every one has terminated (the kubelet frees a pod's
    devices when its containers are gone), else its ``deletionTimestamp`` (a pod removed at once,
    as a preempted placeholder is, has no container end of its own); None when neither says."""
    status = pod.get("status") or {}
    finished = [((c.get("state") or {}).get("terminated") or {}).get("finishedAt") for c in status.get("containerStatuses") or []]
    if finished and all(finished):
        ends = [when for when in map(_when, finished) if when is not None]
        if len(ends) == len(finished):
            return max(ends)
    return _when((pod.get("metadata") or {}).get("deletionTimestamp"))


def _end_time(pod: Mapping[str, Any] | None, now: float, floor: float, *, late: bool = False) -> float:
    """Where a session ends that we hear of ``now``: now when the event is on time (the hub's
    clock is finer than the cluster's second), else the cluster's own end, never before what is
    counted already (``floor``) nor after now. ``late``: the hub was not watching when it ended."""
    ended = _ended_at(pod) if pod is not None else None
    if ended is None or (not late and now - ended <= LATE_S):
        return now
    return max(floor, min(now, ended))


def _when(stamp: Any) -> float | None:
    """A Kubernetes time as epoch seconds. metav1.Time is to the second: what it stamps happened
    within the second that follows, and that second's middle is within half a second of it."""
    if not stamp:
        return None
    try:
        when = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return when if "." in str(stamp) else when + 0.5


def _owner_key(annotations: Mapping[str, Any]) -> str:
    user = annotations.get(keys.USER_ANNOTATION) or annotations.get("hub.jupyter.org/username") or ""
    kernel = annotations.get(keys.KERNEL_ANNOTATION)
    if kernel:
        return f"{user}/kernel:{kernel}"
    return f"{user}/{annotations.get(SERVERNAME_ANNOTATION, '') or ''}"


def _groups(raw: Any) -> list[str]:
    try:
        value = json.loads(raw) if raw else []
    except (TypeError, ValueError):
        return []
    return sorted(str(g) for g in value) if isinstance(value, list) else []
