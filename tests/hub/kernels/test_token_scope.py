"""A token acts only for what it belongs to: a server's own token (readable by the server's code,
and so by whoever the server is shared with) lists, reads and stops that server's GPU kernels
only; a token the hub no longer knows gets nothing; a body past the limit is refused. The kernel
API's handlers and the hub's registry, with the hub's records and its token check stood in."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer

from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels.handlers import handlers
from jupyter_gpuburst.hub.kernels.registry import KernelRecord, KernelRegistry
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.hub.tokenapi import MAX_BODY_BYTES, UnknownToken

PREFIX = "/services/gpuburst/"
SCOPES = ["access:services!service=gpuburst", "custom:gpuburst:kernels!user=alice"]
# the token -> (owner, the server it was made for: None for a token of the user's own)
TOKENS: dict[str, tuple[str, str | None]] = {"of-one": ("alice", "one"), "of-two": ("alice", "two"), "alices": ("alice", None)}
# still accepted by HubAuth's cache, but the hub deleted it (its server stopped)
STALE = "of-stopped"


class Hub:
    """The hub's records as the kernel API reads them (kernels/service.LiveHub)."""

    log = logging.getLogger("test")

    def server_of_token(self, user: str, token: str) -> str | None:
        if token not in TOKENS or TOKENS[token][0] != user:
            raise UnknownToken(user)
        return TOKENS[token][1]

    def groups(self, user: str) -> frozenset[str]:
        return frozenset()

    admins: frozenset[str] = frozenset()

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def active_spawner(self, user: str, server: str) -> Any:
        return None


class Auth:
    async def user_for_token(self, token: str, sync: bool = True) -> dict[str, Any] | None:
        if token in TOKENS or token == STALE:
            return {"kind": "user", "name": "alice", "scopes": SCOPES}
        return None


class Service:
    name = "gpuburst"

    def hub_auth(self) -> Auth:
        return Auth()


@pytest.fixture
async def api():
    # the hub's tracker, never started: no cluster, no pods, so every kernel here is a record still starting
    tracker = CapacityTracker(None, GPUBurstSettings(), logging.getLogger("test"))
    registry = KernelRegistry(tracker, GPUKernelSettings(), None, None, "img", "default")
    registry.profiles = {}
    profile = KernelProfile(slug="gpu-1", display_name="GPU", resource="nvidia.com/gpu", count=1)
    for record_id, server in (("a1", "one"), ("a2", "two")):
        registry.records[record_id] = KernelRecord(record_id, "alice", server, "", profile, "default")

    async def source(hub: Any) -> KernelRegistry:
        return registry

    hub = Hub()
    app = web.Application(handlers(PREFIX, source, hub), service=Service())
    server = HTTPServer(app)
    (port,) = free_ports(1)
    server.listen(port, "127.0.0.1")
    client = AsyncHTTPClient()

    async def call(token: str, method: str, path: str = "", body: bytes | None = None) -> tuple[int, Any]:
        try:
            response = await client.fetch(
                f"http://127.0.0.1:{port}{PREFIX}api/kernels{path}",
                method=method,
                headers={"Authorization": f"token {token}"},
                body=body if body is not None else (b"{}" if method == "POST" else None),
                allow_nonstandard_methods=True,
            )
        except HTTPClientError as exc:
            response = exc.response
        text = response.body.decode() if response is not None else ""
        return response.code, (json.loads(text) if text else None)

    call.registry = registry
    call.hub = hub
    yield call
    server.stop()


async def test_a_servers_token_lists_reads_and_stops_only_its_own_servers_kernels(api):
    status, listing = await api("of-one", "GET")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == ["a1"]
    status, refused = await api("of-one", "GET", "?server=two")
    assert status == 403 and "that server only" in refused["message"]
    # the other server's kernel reads as missing, and stays
    for method in ("GET", "DELETE"):
        status, _ = await api("of-one", method, "/a2")
        assert status == 404, method
    assert "a2" in api.registry.records
    status, own = await api("of-one", "GET", "/a1")
    assert status == 200 and own["server_name"] == "one"
    status, _ = await api("of-one", "DELETE", "/a1")
    assert status == 204 and "a1" not in api.registry.records
    # a token of alice's own acts for every server of hers
    status, listing = await api("alices", "GET")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == ["a2"]
    status, listing = await api("alices", "GET", "?server=two")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == ["a2"]
    # and a server's token cannot start a kernel for another server
    status, refused = await api("of-one", "POST", body=json.dumps({"server_name": "two"}).encode())
    assert status == 403 and "that server only" in refused["message"]


@pytest.mark.parametrize(("method", "path"), [("GET", ""), ("GET", "/a1"), ("DELETE", "/a1"), ("POST", "")])
async def test_a_token_the_hub_no_longer_knows_gets_nothing(api, method, path):
    status, refused = await api(STALE, method, path)
    assert status == 403 and "no longer valid" in refused["message"]
    assert sorted(api.registry.records) == ["a1", "a2"]


async def test_a_body_past_the_limit_is_refused_with_413(api):
    status, refused = await api("of-one", "POST", body=b" " * (MAX_BODY_BYTES + 1))
    assert status == 413 and refused["message"] == "the request body is larger than 4 MiB"
    # one within it is read: malformed JSON says so
    status, refused = await api("of-one", "POST", body=b"[" * 1024)
    assert status == 400 and "JSON" in refused["message"]


async def test_an_admins_budget_is_judged_by_the_hubs_record_not_the_tokens_model(api, monkeypatch):
    # a server's token's model has no "admin": only the hub's own record can say it
    asked: list[bool] = []

    def budget_state(tracker: Any, user: str, groups: Any, admin: bool = False) -> tuple[str, bool]:
        asked.append(admin)
        return ("", False) if admin else ("Your GPU-hour budget is used up.", True)

    monkeypatch.setattr(sys.modules[handlers.__module__], "budget_state", budget_state)
    status, listing = await api("of-one", "GET")
    assert status == 200 and listing["budget_used_up"] is True
    api.hub.admins = frozenset({"alice"})
    status, listing = await api("of-one", "GET")
    assert status == 200 and listing["budget_used_up"] is False and listing["budget"] == ""
    assert asked == [False, True]
