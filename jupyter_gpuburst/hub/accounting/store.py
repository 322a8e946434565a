"""The GPU-hours ledger on disk: one small SQLite file beside the hub's database.

Two tables. ``sessions`` has one row per pod that held GPUs (by pod uid, so a pod seen again
after a hub restart is the same row, never a second one) with who, where and what it held, and
``counted_until``: the wall-clock time up to which its GPU-seconds are in ``charges``. ``charges``
has the GPU-seconds per session and UTC day. Moving ``counted_until`` and adding the charge
happen in one transaction, so a hub killed at any moment has counted each second once or not
yet, never twice. ``grants`` keeps the extra GPU-hours admins gave for one budget period,
``hub`` when the hub last wrote (its heartbeat), ``site_samples`` each site's GPUs every few
minutes for the capacity page's chart.

Each session also keeps what it used of what it held (for right-sizing): its peak GPU memory,
the devices' memory, and its peak and mean GPU utilization, as its server reported them. Those
columns came after release 0.2.0; a ledger of 0.2.0 gains them in place when the hub starts
(``migrate``), its rows kept, their figures unknown (NULL).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_gpuburst.hub.database import immediate_transaction

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
    ended REAL,
    peak_memory_bytes REAL,
    memory_total_bytes REAL,
    peak_utilization REAL,
    utilization_sum REAL NOT NULL DEFAULT 0,
    utilization_samples INTEGER NOT NULL DEFAULT 0
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
    reserved INTEGER NOT NULL,
    idle INTEGER
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
# the ledger's layout: 0 is release 0.2.0's, 1 adds sessions' use figures and idle GPUs per sample
SCHEMA_VERSION = 1
# (column, its declaration) added to ``sessions`` since 0.2.0, in order
ADDED_COLUMNS = (
    ("peak_memory_bytes", "REAL"),
    ("memory_total_bytes", "REAL"),
    ("peak_utilization", "REAL"),
    ("utilization_sum", "REAL NOT NULL DEFAULT 0"),
    ("utilization_samples", "INTEGER NOT NULL DEFAULT 0"),
)
# the same for ``site_samples``: GPUs held idle at that moment (NULL: not known)
ADDED_SAMPLE_COLUMNS = (("idle", "INTEGER"),)
SAMPLE_COLUMNS = ("t", "site", "resource", "total", "in_use", "reserved", "idle")
SESSION_COLUMNS = (
    "uid",
    "pod",
    "key",
    "user",
    "groups",
    "profile",
    "site",
    "resource",
    "count",
    "mode",
    "started",
    "counted_until",
    "ended",
    *(name for name, _ in ADDED_COLUMNS),
)
USE_COLUMNS = tuple(name for name, _ in ADDED_COLUMNS)


@dataclass
class Use:
    """What a session used of the GPUs it held, as its server measured it (None: not known)."""

    peak_memory_bytes: float | None = None
    memory_total_bytes: float | None = None
    peak_utilization: float | None = None
    utilization_sum: float = 0.0
    utilization_samples: int = 0

    def add(self, peak_memory: float | None, memory_total: float | None, peak_util: float | None, util_sum: float, samples: int) -> None:
        """Figures of one report (since the previous one) folded in: peaks by max, means by sum."""
        if peak_memory is not None:
            self.peak_memory_bytes = max(self.peak_memory_bytes or 0.0, peak_memory)
        if memory_total is not None:
            self.memory_total_bytes = max(self.memory_total_bytes or 0.0, memory_total)
        if peak_util is not None:
            self.peak_utilization = max(self.peak_utilization or 0.0, peak_util)
        self.utilization_sum += util_sum
        self.utilization_samples += samples

    @property
    def mean_utilization(self) -> float | None:
        return self.utilization_sum / self.utilization_samples if self.utilization_samples else None

    def row(self) -> tuple[Any, ...]:
        return (self.peak_memory_bytes, self.memory_total_bytes, self.peak_utilization, self.utilization_sum, self.utilization_samples)


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
    use: Use = field(default_factory=Use)
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
        self.migrate()

    def migrate(self) -> None:
        """Create the tables, or bring a ledger of an earlier release up to this one in place."""
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} is a GPU usage ledger of a newer jupyter-gpuburst (layout {version}); upgrade the hub")
            for table, added in (("sessions", ADDED_COLUMNS), ("site_samples", ADDED_SAMPLE_COLUMNS)):
                have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if have:  # a table of an earlier release: its rows stay, the new columns come empty
                    for name, declaration in added:
                        if name not in have:
                            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.db)

    # ---- sessions ----------------------------------------------------------------------------
    def open_sessions(self) -> dict[str, Session]:
        rows = self.db.execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE ended IS NULL").fetchall()
        return {row[0]: _session(row) for row in rows}

    def add_samples(self, samples: Iterable[tuple[float, str, str, int, int, int, int | None]], keep_after: float) -> None:
        """GPUs per site and resource at one moment (total, in use, reserved, held idle or
        None when not known); older ones go."""
        with self.transaction() as db:
            db.executemany(f"INSERT INTO site_samples ({', '.join(SAMPLE_COLUMNS)}) VALUES (?,?,?,?,?,?,?)", samples)
            db.execute("DELETE FROM site_samples WHERE t < ?", (keep_after,))

    def samples(self, since: float) -> list[tuple[float, str, str, int, int, int, int | None]]:
        return self.db.execute(f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM site_samples WHERE t >= ? ORDER BY t", (since,)).fetchall()

    def alive_until(self) -> float | None:
        row = self.db.execute("SELECT value FROM hub WHERE name = 'alive_until'").fetchone()
        return float(row[0]) if row else None

    def save(
        self,
        new: Iterable[Session],
        items: Iterable[tuple[Session, float, float | None, float | None]],
        alive_until: float,
        used: Iterable[Session] = (),
    ) -> None:
        """New sessions, then for each (session, until, idle_since, ended) of ``items`` its
        GPU-seconds from ``counted_until`` to ``until`` (idle from ``idle_since``, None for not
        idle), ended when ``ended``, the use figures of ``used``, and when the hub was last
        alive: in one transaction."""
        with self.transaction() as db:
            for session in new:
                self._insert(db, session)
            done = self._charge(db, items)
            for session in used:
                db.execute(f"UPDATE sessions SET {_assign(USE_COLUMNS)} WHERE uid = ?", (*session.use.row(), session.uid))
            db.execute("INSERT INTO hub VALUES ('alive_until', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value", (alive_until,))
        _counted(done)

    @staticmethod
    def _insert(db: sqlite3.Connection, session: Session) -> None:
        db.execute(
            f"INSERT OR IGNORE INTO sessions ({', '.join(SESSION_COLUMNS)}) VALUES ({', '.join('?' * len(SESSION_COLUMNS))})",
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
                *session.use.row(),
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
                f"UPDATE sessions SET counted_until = ?, ended = ?, {_assign(USE_COLUMNS)} WHERE uid = ?",
                (new_until, ended, *session.use.row(), session.uid),
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
        session_names = ("uid", "user", "groups", "profile", "site", "resource", "count", "mode", "key", "started", "ended")
        charge_names = ("day", "gpu_seconds", "idle_seconds")
        names = (*session_names, *charge_names, *USE_COLUMNS)
        columns = ", ".join([*(f"s.{n}" for n in session_names), *(f"c.{n}" for n in charge_names), *(f"s.{n}" for n in USE_COLUMNS)])
        rows = self.db.execute(f"SELECT {columns} FROM charges c JOIN sessions s ON s.uid = c.uid WHERE {where}", args).fetchall()
        out = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            item["groups"] = tuple(json.loads(item["groups"]))
            if group is None or group in item["groups"]:
                out.append(item)
        return out

    def measured_sessions(self, user: str | None = None, since: float | None = None, limit: int | None = None) -> list[Session]:
        """Sessions whose GPU memory use is known, latest first: ``user``'s only, or those that
        ran after ``since``, at most ``limit`` (for right-sizing)."""
        where, args = "peak_memory_bytes IS NOT NULL", []
        if user is not None:
            where, args = where + " AND user = ?", [*args, user]
        if since is not None:
            where, args = where + " AND (ended IS NULL OR ended >= ?)", [*args, since]
        sql = f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE {where} ORDER BY started DESC"
        if limit is not None:
            sql, args = sql + " LIMIT ?", [*args, limit]
        return [_session(row) for row in self.db.execute(sql, args).fetchall()]

    def unit_memory(self, resource: str) -> float | None:
        """The least GPU memory per unit any session of ``resource`` measured (bytes), or None."""
        row = self.db.execute(
            "SELECT MIN(memory_total_bytes / count) FROM sessions WHERE resource = ? AND memory_total_bytes IS NOT NULL AND count > 0",
            (resource,),
        ).fetchone()
        return float(row[0]) if row and row[0] else None

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


def _assign(columns: Iterable[str]) -> str:
    return ", ".join(f"{name} = ?" for name in columns)


def _counted(done: list[tuple[Session, float, float | None]]) -> None:
    for session, until, ended in done:
        session.counted_until = until
        session.ended = ended


def _session(row: tuple) -> Session:
    (uid, pod, key, user, groups, profile, site, resource, count, mode, started, counted_until, ended, *use) = row
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
        use=Use(use[0], use[1], use[2], float(use[3] or 0.0), int(use[4] or 0)),
    )
