"""Spawners that save their state in the same event-loop turn share one database commit."""

from __future__ import annotations

import asyncio

from jupyterhub import orm

from jupyter_gpuburst.hub.spawner import state as spawnstate


class _Spawner:
    def __init__(self, orm_spawner: orm.Spawner, state: dict) -> None:
        self.orm_spawner = orm_spawner
        self._state = state

    def get_state(self) -> dict:
        return self._state


def _db(tmp_path, users: int):
    url = f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    session = orm.new_session_factory(url)()
    rows = []
    for i in range(users):
        user = orm.User(name=f"student{i}")
        session.add(user)
        row = orm.Spawner(user=user, name="")
        session.add(row)
        rows.append(row)
    session.commit()
    return url, session, rows


async def test_one_commit_for_every_spawner_saving_together(tmp_path, monkeypatch) -> None:
    url, session, rows = _db(tmp_path, 5)
    commits = []
    real_commit = session.commit
    monkeypatch.setattr(session, "commit", lambda: (commits.append(1), real_commit())[1])
    spawners = [_Spawner(row, {"gpuburst": {"site": f"site-{i}"}}) for i, row in enumerate(rows)]
    assert all(await asyncio.gather(*(spawnstate.save_state_together(s) for s in spawners)))
    assert len(commits) == 1
    reader = orm.new_session_factory(url)()
    saved = {row.id: row.state for row in reader.query(orm.Spawner)}
    assert saved == {row.id: {"gpuburst": {"site": f"site-{i}"}} for i, row in enumerate(rows)}
    # a later save is a commit of its own
    assert await spawnstate.save_state_together(spawners[0])
    assert len(commits) == 2
    reader.close()
    session.close()


async def test_a_failed_commit_reaches_every_waiter(tmp_path, monkeypatch) -> None:
    _url, session, rows = _db(tmp_path, 2)

    def broken() -> None:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(session, "commit", broken)
    results = await asyncio.gather(*(spawnstate.save_state_together(_Spawner(row, {})) for row in rows), return_exceptions=True)
    assert [str(r) for r in results] == ["database is locked", "database is locked"]
    session.rollback()
    session.close()


async def test_without_a_database_row_nothing_is_saved() -> None:
    assert await spawnstate.save_state_together(_Spawner(None, {})) is False
