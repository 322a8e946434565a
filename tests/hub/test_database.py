"""`hub.database.sqlite_wal`: JupyterHub's own database session, opened as the hub opens it, in WAL mode."""

from __future__ import annotations

import sqlite3

import pytest
from jupyterhub import orm
from sqlalchemy import text

from jupyter_gpuburst.hub.database import sqlite_wal

pytestmark = pytest.mark.usefixtures("sqlite_wal_undone")


def test_jupyterhub_s_sqlite_database_opens_in_wal_mode_with_normal_sync(tmp_path):
    path = tmp_path / "jupyterhub.sqlite"
    sqlite_wal()
    sqlite_wal()  # a config file read twice registers it once
    db = orm.new_session_factory(f"sqlite:///{path}")()
    db.add(orm.User(name="alice"))
    db.commit()
    assert db.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    assert db.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
    assert db.execute(text("PRAGMA foreign_keys")).scalar() == 1  # JupyterHub's own listener still ran
    db.close()
    # the mode is the file's from now on: any other reader sees it
    other = sqlite3.connect(path)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT name FROM users").fetchall() == [("alice",)]
    other.close()
