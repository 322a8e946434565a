"""JupyterHub's own SQLite database in write-ahead-log mode, for a hub that starts many servers at once.

JupyterHub commits to its database several times per spawn, on its event loop. With SQLite's
default rollback journal each commit creates, syncs and deletes a journal file: at a lab's start
with 500 students those commits were a third of the time the hub's loop was busy
(docs/warm-pools.md, "The hub's database"). In WAL mode with ``synchronous=NORMAL`` a commit
appends to the log and syncs only at checkpoints; a power cut may lose the last commits, never
corrupt the database.
PostgreSQL or MySQL need none of this.

In ``jupyterhub_config.py``::

    from jupyter_gpuburst.hub.database import sqlite_wal
    sqlite_wal()
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def sqlite_wal() -> None:
    """Open every SQLite database of this process through SQLAlchemy (JupyterHub's) in WAL mode
    with ``synchronous=NORMAL``; other databases are left as they are. Once per process."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _on_connect):
        event.listen(Engine, "connect", _on_connect)


@contextmanager
def immediate_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``db`` (opened with ``isolation_level=None``), its write lock taken
    at the start: a second writer, in this process or another, waits for it and then reads what
    it wrote. Rolled back on any exception."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
