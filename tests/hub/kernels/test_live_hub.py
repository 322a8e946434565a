"""`LiveHub`: the hub's own users as the kernel API reads them, with JupyterHub's real ORM and user cache."""

from __future__ import annotations

import pytest
from jupyterhub import orm
from jupyterhub.user import UserDict
from sqlalchemy import event

from jupyter_gpuburst.hub.kernels.service import LiveHub


@pytest.fixture
def hub(monkeypatch):
    db = orm.new_session_factory("sqlite:///:memory:")()
    for name in ("alice", "bob"):
        db.add(orm.User(name=name))
    db.commit()
    users = UserDict(lambda: db, {})
    app = type("App", (), {"db": db, "users": users})()
    monkeypatch.setattr(LiveHub, "app", property(lambda self: app))
    monkeypatch.setattr(LiveHub, "_ids", {})
    queries: list[str] = []
    event.listen(db.get_bind(), "before_cursor_execute", lambda *args: queries.append(args[2]))
    return app, queries


def test_a_user_is_queried_by_name_once_then_read_from_the_hub_s_cache(hub):
    app, queries = hub
    alice = LiveHub()._user("alice")
    assert alice is not None and alice.name == "alice" and alice is app.users[alice.id]
    asked = len(queries)
    assert asked > 0
    # every later request (each makes a LiveHub of its own) reads the hub's cache
    for _ in range(3):
        assert LiveHub()._user("alice") is alice
        assert LiveHub().groups("alice") == frozenset()
    assert len(queries) == asked
    assert LiveHub()._user("nobody") is None


def test_a_renamed_or_deleted_user_no_longer_answers_to_the_old_name(hub):
    app, _ = hub
    alice = LiveHub()._user("alice")
    alice.orm_user.name = "carol"
    app.db.commit()
    assert LiveHub()._user("alice") is None
    assert LiveHub()._user("carol") is alice
    app.users.delete(alice)
    assert LiveHub()._user("carol") is None
    bob = LiveHub()._user("bob")
    assert bob is not None and bob.name == "bob"
