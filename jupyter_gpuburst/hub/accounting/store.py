"""The GPU-hours ledger on disk: one small SQLite file beside the hub's database.

Two tables. ``sessions`` has one row per pod that held GPUs (by pod uid, so a pod seen again
after a hub restart is the same row, never a second one) with who, where and what it held, and
``counted_until``: the wall-clock time up to which its GPU-seconds are in ``charges``. ``charges``
has the GPU-seconds per session and UTC day. Moving ``counted_until`` and adding the charge
happen in one transaction, so a hub killed at any moment has counted each second once or not
yet, never twice. ``grants`` keeps the extra GPU-hours admins gave for one budget period,
``hub`` when the hub last wrote (its heartbeat), ``site_samples`` each site's GPUs every few
minutes for the capacity page's chart.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    uid TEXT PRIMARY KEY,
    pod TEXT NOT NULL,
    key TEXT NOT NULL,
    user TEXT NOT NULL,
    groups TEXT NOT NULL,
    profile TEXT NOT NULL,
    site TEXT NOT NULL,
    resource TEXT NOT NULL,
    count INTEGER NOT NULL,
    mode TEXT NOT NULL,
    started REAL NOT NULL,
    counted_until REAL NOT NULL,
    ended REAL
);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (ended);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user);
CREATE TABLE IF NOT EXISTS charges (
    uid TEXT NOT NULL,
    day TEXT NOT NULL,
    gpu_seconds REAL NOT NULL,
    idle_seconds REAL NOT NULL,
    PRIMARY KEY (uid, day)
);
CREATE INDEX IF NOT EXISTS charges_day ON charges (day);
CREATE TABLE IF NOT EXISTS site_samples (
    t REAL NOT NULL,
    site TEXT NOT NULL,
    resource TEXT NOT NULL,
    total INTEGER NOT NULL,
    in_use INTEGER NOT NULL,
    reserved INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS site_samples_t ON site_samples (t);
CREATE TABLE IF NOT EXISTS hub (
    name TEXT PRIMARY KEY,
    value REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS grants (
    who TEXT NOT NULL,
    period TEXT NOT NULL,
    hours REAL NOT NULL,
    granted_by TEXT NOT NULL,
    granted_at REAL NOT NULL
);
"""


@dataclass
class Session:
    """One pod's hold on GPUs: who, where, what, and how far it has been counted."""

    uid: str
    pod: str
    key: str
    user: str
    groups: tuple[str, ...]
    profile: str
    site: str
    resource: str
    count: int
    mode: str
    started: float
    counted_until: float
    ended: float | None = None
    # not stored: the latest GPU-seconds not yet in charges are computed from counted_until
    extra: dict[str, Any] = field(default_factory=dict)


def day_of(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).date().isoformat()


def split_by_day(start: float, end: float) -> Iterator[tuple[str, float, float]]:
    """``[start, end)`` cut at UTC midnights: (day, from, to) pieces."""
    while start < end:
        day = dt.datetime.fromtimestamp(start, dt.UTC).date()
        midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC).timestamp()
        stop = min(end, midnight)
        yield day.isoformat(), start, stop
        start = stop


class UsageStore:
    """Reads and writes the ledger's tables (one connection, the hub's event loop only)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        # a commit survives the hub being killed; only a power cut may lose the last one
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # ---- sessions ----------------------------------------------------------------------------
    def open_sessions(self) -> dict[str, Session]:
        rows = self.db.execute("SELECT * FROM sessions WHERE ended IS NULL").fetchall()
        return {row[0]: _session(row) for row in rows}

    def add_samples(self, samples: Iterable[tuple[float, str, str, int, int, int]], keep_after: float) -> None:
        """GPUs per site and resource at one moment (total, in use, reserved); older ones go."""
        with self.transaction() as db:
            db.executemany("INSERT INTO site_samples VALUES (?,?,?,?,?,?)", samples)
            db.execute("DELETE FROM site_samples WHERE t < ?", (keep_after,))

    def samples(self, since: float) -> list[tuple[float, str, str, int, int, int]]:
        return self.db.execute("SELECT * FROM site_samples WHERE t >= ? ORDER BY t", (since,)).fetchall()

    def alive_until(self) -> float | None:
        row = self.db.execute("SELECT value FROM hub WHERE name = 'alive_until'").fetchone()
        return float(row[0]) if row else None

    def save(self, new: Iterable[Session], items: Iterable[tuple[Session, float, float | None, float | None]], alive_until: float) -> None:
        """New sessions, then for each (session, until, idle_since, ended) of ``items`` its
        GPU-seconds from ``counted_until`` to ``until`` (idle from ``idle_since``, None for not
        idle), ended when ``ended``, and when the hub was last alive: in one transaction."""
        with self.transaction() as db:
            for session in new:
                self._insert(db, session)
            done = self._charge(db, items)
            db.execute("INSERT INTO hub VALUES ('alive_until', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value", (alive_until,))
        _counted(done)

    @staticmethod
    def _insert(db: sqlite3.Connection, session: Session) -> None:
        db.execute(
            "INSERT OR IGNORE INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                session.uid,
                session.pod,
                session.key,
                session.user,
                json.dumps(list(session.groups)),
                session.profile,
                session.site,
                session.resource,
                session.count,
                session.mode,
                session.started,
                session.counted_until,
                session.ended,
            ),
        )

    @staticmethod
    def _charge(
        db: sqlite3.Connection, items: Iterable[tuple[Session, float, float | None, float | None]]
    ) -> list[tuple[Session, float, float | None]]:
        """The charges' statements; the sessions in memory move on only once they committed."""
        done = []
        counted: dict[str, float] = {}
        for session, until, idle_since, ended in items:
            start = counted.get(session.uid, session.counted_until)
            for day, a, b in split_by_day(start, until):
                idle = 0.0 if idle_since is None else max(0.0, b - max(a, idle_since))
                db.execute(
                    "INSERT INTO charges VALUES (?,?,?,?) ON CONFLICT (uid, day) DO UPDATE SET "
                    "gpu_seconds = gpu_seconds + excluded.gpu_seconds, idle_seconds = idle_seconds + excluded.idle_seconds",
                    (session.uid, day, (b - a) * session.count, idle * session.count),
                )
            new_until = max(start, until)
            db.execute(
                "UPDATE sessions SET counted_until = ?, ended = ? WHERE uid = ?",
                (new_until, ended, session.uid),
            )
            counted[session.uid] = new_until
            done.append((session, new_until, ended))
        return done

    # ---- reading -----------------------------------------------------------------------------
    def usage_rows(self, first_day: str, last_day: str, user: str | None = None, group: str | None = None) -> list[dict[str, Any]]:
        """GPU-seconds per session and day between two UTC days (inclusive), with the
        session's who, where and what; only ``user``'s, or only ``group``'s members', if given."""
        where, args = "c.day >= ? AND c.day <= ?", [first_day, last_day]
        if user is not None:
            where, args = where + " AND s.user = ?", [*args, user]
        if group is not None:
            where, args = where + " AND instr(s.groups, ?) > 0", [*args, json.dumps(group)]
        rows = self.db.execute(
            "SELECT s.uid, s.user, s.groups, s.profile, s.site, s.resource, s.count, s.mode, s.key, s.started, "
            "s.ended, c.day, c.gpu_seconds, c.idle_seconds FROM charges c JOIN sessions s ON s.uid = c.uid "
            f"WHERE {where}",
            args,
        ).fetchall()
        names = (
            "uid",
            "user",
            "groups",
            "profile",
            "site",
            "resource",
            "count",
            "mode",
            "key",
            "started",
            "ended",
            "day",
            "gpu_seconds",
            "idle_seconds",
        )
        out = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            item["groups"] = tuple(json.loads(item["groups"]))
            if group is None or group in item["groups"]:
                out.append(item)
        return out

    def totals(self) -> list[tuple[str, str, str, str, str, float, float]]:
        """All-time GPU-seconds per (user, profile, site, resource, mode), for counters."""
        return self.db.execute(
            "SELECT s.user, s.profile, s.site, s.resource, s.mode, SUM(c.gpu_seconds), SUM(c.idle_seconds) "
            "FROM charges c JOIN sessions s ON s.uid = c.uid GROUP BY 1, 2, 3, 4, 5"
        ).fetchall()

    # ---- grants ------------------------------------------------------------------------------
    def add_grant(self, who: str, period: str, hours: float, granted_by: str, at: float) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO grants VALUES (?,?,?,?,?)", (who, period, hours, granted_by, at))

    def granted(self, who: str, period: str) -> float:
        row = self.db.execute("SELECT SUM(hours) FROM grants WHERE who = ? AND period = ?", (who, period)).fetchone()
        return float(row[0] or 0.0)


def _counted(done: list[tuple[Session, float, float | None]]) -> None:
    for session, until, ended in done:
        session.counted_until = until
        session.ended = ended


def _session(row: tuple) -> Session:
    (uid, pod, key, user, groups, profile, site, resource, count, mode, started, counted_until, ended) = row
    return Session(
        uid=uid,
        pod=pod,
        key=key,
        user=user,
        groups=tuple(json.loads(groups)),
        profile=profile,
        site=site,
        resource=resource,
        count=int(count),
        mode=mode,
        started=started,
        counted_until=counted_until,
        ended=ended,
    )
