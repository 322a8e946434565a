"""`LiveHub` says which server a token is the own token of, and who is an admin, from the hub's
own records (JupyterHub's real ORM and user cache): a token it no longer has gets nothing."""

from __future__ import annotations

import pytest
from jupyterhub import orm
from jupyterhub.user import UserDict

from jupyter_gpuburst.hub.kernels.service import LiveHub
from jupyter_gpuburst.hub.tokenapi import UnknownToken


@pytest.fixture
def hub(monkeypatch):
    db = orm.new_session_factory("sqlite:///:memory:")()
    for name in ("alice", "bob"):
        db.add(orm.User(name=name))
    # the hub's own OAuth client, which tokens made without one belong to
    db.add(orm.OAuthClient(identifier="jupyterhub"))
    db.commit()
    alice = orm.User.find(db, "alice")
    for server in ("", "one"):
        db.add(orm.Spawner(user=alice, name=server))
    db.commit()
    users = UserDict(lambda: db, {})
    app = type("App", (), {"db": db, "users": users})()
    monkeypatch.setattr(LiveHub, "app", property(lambda self: app))
    monkeypatch.setattr(LiveHub, "_ids", {})
    return app


def token(app, user: str, note: str) -> str:
    return app.users[orm.User.find(app.db, user)].new_api_token(note=note)


def test_a_servers_own_token_is_that_servers_and_the_users_own_is_none(hub):
    # as JupyterHub notes the tokens it makes for servers (user.spawn)
    assert LiveHub().server_of_token("alice", token(hub, "alice", "Server at /user/alice/one/")) == "one"
    assert LiveHub().server_of_token("alice", token(hub, "alice", "Server at /user/alice/")) == ""
    assert LiveHub().server_of_token("alice", token(hub, "alice", "retrieved from spawner one")) == "one"
    assert LiveHub().server_of_token("alice", token(hub, "alice", "for my scripts")) is None


def test_a_token_the_hub_no_longer_has_or_of_someone_else_is_unknown(hub):
    stopped = token(hub, "alice", "Server at /user/alice/one/")
    # JupyterHub deletes a server's token when the server stops; HubAuth's cache may still accept it
    hub.db.delete(orm.APIToken.find(hub.db, stopped))
    hub.db.commit()
    for user, unknown in [
        ("alice", stopped),
        ("alice", "never-made"),
        ("alice", token(hub, "alice", "Server at /user/alice/removed/")),  # a server the hub no longer has
        ("alice", token(hub, "bob", "for my scripts")),
    ]:
        with pytest.raises(UnknownToken):
            LiveHub().server_of_token(user, unknown)


def test_adminship_is_the_hubs_record_not_the_tokens(hub):
    alice = orm.User.find(hub.db, "alice")
    alice.admin = True
    hub.db.commit()
    assert LiveHub().is_admin("alice") is True
    assert LiveHub().is_admin("bob") is False
    assert LiveHub().is_admin("nobody") is False
