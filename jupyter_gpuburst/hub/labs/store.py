"""The bookings on disk, with what each lab's report times (servers ready, first GPU cells in
servers and in GPU kernels):
one small SQLite file beside the hub's database, as the GPU-hours ledger keeps its rows
(hub/accounting/store.py), so that both survive hub restarts.

A save reads every booking and writes the new one in one ``BEGIN IMMEDIATE`` transaction:
two saves at once (two requests, two hub processes on one file) are judged one after the
other, and the second sees the first's GPUs as taken.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from jupyter_gpuburst.hub.database import immediate_transaction
from jupyter_gpuburst.hub.labs.model import Booking

SCHEMA = """
CREATE TABLE IF NOT EXISTS bookings (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS starts (
    booking TEXT NOT NULL,
    lab REAL NOT NULL,
    user TEXT NOT NULL,
    asked REAL NOT NULL,
    ready REAL,
    PRIMARY KEY (booking, lab, user)
);
CREATE TABLE IF NOT EXISTS first_cells (
    booking TEXT NOT NULL,
    lab REAL NOT NULL,
    user TEXT NOT NULL,
    asked REAL NOT NULL,
    ran REAL,
    PRIMARY KEY (booking, lab, user)
);
CREATE TABLE IF NOT EXISTS server_first_cells (
    booking TEXT NOT NULL,
    lab REAL NOT NULL,
    user TEXT NOT NULL,
    ran REAL NOT NULL,
    PRIMARY KEY (booking, lab, user)
)
"""


class LabStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # a second writer waits for the first's transaction instead of failing at once
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                self.db.execute(statement)

    def close(self) -> None:
        self.db.close()

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self.db)

    def _all(self) -> list[Booking]:
        rows = self.db.execute("SELECT data FROM bookings ORDER BY created, id").fetchall()
        return [Booking.from_json(json.loads(row[0])) for row in rows]

    def bookings(self) -> list[Booking]:
        return self._all()

    def add(self, judged: Callable[[list[Booking]], Booking]) -> Booking:
        """Save what ``judged(every booking now)`` returns; what it raises saves nothing."""
        with self._transaction() as db:
            booking = judged(self._all())
            db.execute(
                "INSERT INTO bookings (id, created, data) VALUES (?, ?, ?)", (booking.id, booking.created, json.dumps(booking.as_json()))
            )
        return booking

    def note_start(self, booking_id: str, lab: float, user: str, asked: float, ready: float | None) -> None:
        """A student's first start in a lab (``lab``: its start), and when it was first ready."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO starts (booking, lab, user, asked) VALUES (?, ?, ?, ?)", (booking_id, lab, user, asked))
            if ready is not None:
                db.execute(
                    "UPDATE starts SET ready = ? WHERE booking = ? AND lab = ? AND user = ? AND ready IS NULL",
                    (ready, booking_id, lab, user),
                )

    def starts(self, booking_id: str, lab: float) -> list[tuple[str, float, float | None]]:
        """(user, asked, ready or None) of each student who started in that lab."""
        return self.db.execute(
            "SELECT user, asked, ready FROM starts WHERE booking = ? AND lab = ? ORDER BY asked", (booking_id, lab)
        ).fetchall()

    def note_server_first_cell(self, booking_id: str, lab: float, user: str, ran: float) -> None:
        """The first cell that ran in the student's GPU server since their Start in that lab (server
        mode); a cell from before the Start, or without one, changes nothing, and the earliest stays."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO server_first_cells (booking, lab, user, ran) "
                "SELECT booking, lab, user, ? FROM starts WHERE booking = ? AND lab = ? AND user = ? AND asked <= ? "
                "ON CONFLICT (booking, lab, user) DO UPDATE SET ran = min(ran, excluded.ran)",
                (ran, booking_id, lab, user, ran),
            )

    def server_starts(self, booking_id: str, lab: float) -> list[tuple[str, float, float | None, float | None]]:
        """(user, asked, ready or None, first cell ran or None) of each student who started in that lab."""
        return self.db.execute(
            "SELECT s.user, s.asked, s.ready, c.ran FROM starts s LEFT JOIN server_first_cells c "
            "ON c.booking = s.booking AND c.lab = s.lab AND c.user = s.user "
            "WHERE s.booking = ? AND s.lab = ? ORDER BY s.asked",
            (booking_id, lab),
        ).fetchall()

    def note_kernel_asked(self, booking_id: str, lab: float, user: str, asked: float) -> None:
        """A student's first GPU kernel asked for in a lab (kernel mode)."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO first_cells (booking, lab, user, asked) VALUES (?, ?, ?, ?)", (booking_id, lab, user, asked))

    def note_first_cell(self, booking_id: str, lab: float, user: str, ran: float) -> None:
        """The first cell that ran on one of the student's GPU kernels since they first asked
        for one in that lab; later cells, and cells from before the ask, change nothing."""
        with self._transaction() as db:
            db.execute(
                "UPDATE first_cells SET ran = ? WHERE booking = ? AND lab = ? AND user = ? AND ran IS NULL AND asked <= ?",
                (ran, booking_id, lab, user, ran),
            )

    def first_cells(self, booking_id: str, lab: float) -> list[tuple[str, float, float | None]]:
        """(user, asked, first cell ran or None) of each student who asked for a GPU kernel in that lab."""
        return self.db.execute(
            "SELECT user, asked, ran FROM first_cells WHERE booking = ? AND lab = ? ORDER BY asked", (booking_id, lab)
        ).fetchall()

    def replace(self, booking_id: str, change: Callable[[Booking], Booking]) -> Booking:
        """Save ``change(the booking)``; KeyError when there is none of that id."""
        with self._transaction() as db:
            row = db.execute("SELECT data FROM bookings WHERE id = ?", (booking_id,)).fetchone()
            if row is None:
                raise KeyError(booking_id)
            booking = change(Booking.from_json(json.loads(row[0])))
            db.execute("UPDATE bookings SET data = ? WHERE id = ?", (json.dumps(booking.as_json()), booking_id))
        return booking
