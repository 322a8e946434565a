"""A server's own token reports GPU activity and keeps (Keep) for its own server only: whoever the
server is shared with can read that token, and must not keep its owner's other servers from
being culled, nor get them culled by reporting them idle. A token the hub no longer knows gets
nothing. The activity API's handlers, with the culler and the hub's token check stood in."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer

from jupyter_gpuburst.hub.culling.handlers import handlers
from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.hub.tokenapi import UnknownToken

PREFIX = "/services/gpuburst/"
TOKENS: dict[str, str | None] = {"of-one": "one", "alices": None}
STALE = "of-stopped"  # HubAuth's cache still accepts it; the hub deleted it with its server


class Hub:
    def server_of_token(self, user: str, token: str) -> str | None:
        if token not in TOKENS:
            raise UnknownToken(user)
        return TOKENS[token]

    def active_spawner(self, user: str, server: str) -> Any:
        return object()


class Store:
    def __init__(self) -> None:
        self.reports: list[tuple[str, Any]] = []

    def report(self, user: str, body: Any, owns: Any, on_use: Any = None, on_first_cell: Any = None) -> tuple[str, list[str]]:
        self.reports.append((user, body))
        return body.get("server_name", ""), []


class Culler:
    log = logging.getLogger("test")

    def __init__(self) -> None:
        self.hub = Hub()
        self.store = Store()
        self.kept: list[tuple[str, str, str]] = []

    async def registry(self) -> None:
        return None

    async def reply(self, user: str, server: str) -> dict[str, Any]:
        return {"server_name": server}

    async def keep(self, user: str, server: str, target: str) -> tuple[int, str]:
        self.kept.append((user, server, target))
        return 200, "kept"


class Auth:
    async def user_for_token(self, token: str, sync: bool = True) -> dict[str, Any] | None:
        if token in TOKENS or token == STALE:
            return {"kind": "user", "name": "alice", "scopes": ["users:activity!user=alice"]}
        return None


class Service:
    def hub_auth(self) -> Auth:
        return Auth()


@pytest.fixture
async def api():
    culler = Culler()
    app = web.Application(handlers(PREFIX, lambda: culler), service=Service())
    server = HTTPServer(app)
    (port,) = free_ports(1)
    server.listen(port, "127.0.0.1")

    async def post(token: str, path: str, body: Any) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{PREFIX}api/activity{path}", method="POST", headers={"Authorization": f"token {token}"}, body=raw
            )
        except HTTPClientError as exc:
            response = exc.response
        return response.code, json.loads(response.body)

    post.culler = culler
    yield post
    server.stop()


async def test_a_servers_token_reports_and_keeps_for_its_own_server_only(api):
    for path, body in [
        ("", {"server_name": "two", "server": {"last_busy": None}}),
        ("", {}),
        ("/keep", {"server_name": "two", "target": "server"}),
    ]:
        status, refused = await api("of-one", path, body)
        assert status == 403 and "that server only" in refused["message"], (path, body)
    assert api.culler.store.reports == [] and api.culler.kept == []
    # its own server, and alice's own token for any of hers
    assert (await api("of-one", "", {"server_name": "one"}))[0] == 200
    assert (await api("of-one", "/keep", {"server_name": "one", "target": "server"}))[0] == 200
    assert (await api("alices", "/keep", {"server_name": "two", "target": "server"}))[0] == 200
    assert [body["server_name"] for _, body in api.culler.store.reports] == ["one"]
    assert api.culler.kept == [("alice", "one", "server"), ("alice", "two", "server")]


@pytest.mark.parametrize("path", ["", "/keep"])
async def test_a_token_the_hub_no_longer_knows_gets_nothing(api, path):
    status, refused = await api(STALE, path, {"server_name": "one", "target": "server"})
    assert status == 403 and "no longer valid" in refused["message"]
    assert api.culler.store.reports == [] and api.culler.kept == []


async def test_a_report_past_its_limit_is_refused_with_413(api):
    status, refused = await api("of-one", "", b" " * (256 * 1024 + 1))
    assert status == 413 and refused["message"] == "the request body is larger than 256 KiB"
    assert api.culler.store.reports == []
