"""A GPU server's report of its own first cell reaches a server-mode lab's report as a time on the
hub's clock, for the token's owner and the GPUs that server holds; a CPU server's does not, and
nonsense is a 400 that notes nothing. The activity API's handler, with the culler stood in."""

from __future__ import annotations

import json
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer

from jupyter_gpuburst.hub.culling.handlers import handlers
from jupyter_gpuburst.hub.culling.store import SignalStore
from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.hub.queue import classes

PREFIX = "/services/gpuburst/"
GPU = "nvidia.com/gpu"
SPAWNERS = {
    "gpu": SimpleNamespace(_gb_placement=SimpleNamespace(resource=GPU, count=1)),
    # after a hub restart only the saved placement says what the server holds
    "restored": SimpleNamespace(_gb_placement=None, gpuburst_placement={"resource": "nvidia.com/mig-1g.10gb", "count": 1}),
    "cpu": SimpleNamespace(_gb_placement=SimpleNamespace(resource="", count=0)),
}


class Hub:
    def server_of_token(self, user: str, token: str) -> str | None:
        return None  # alice's own token, for any of her servers

    def active_spawner(self, user: str, server: str) -> Any:
        return SPAWNERS.get(server)


class Culler:
    log = logging.getLogger("test")

    def __init__(self) -> None:
        self.hub = Hub()
        self.store = SignalStore()

    async def registry(self) -> None:
        return None

    def kernel_record(self, registry: Any, user: str, record_id: str) -> None:
        return None

    async def reply(self, user: str, server: str) -> dict[str, Any]:
        return {}


class Auth:
    async def user_for_token(self, token: str, sync: bool = True) -> dict[str, Any]:
        return {"kind": "user", "name": "alice", "scopes": ["users:activity!user=alice"]}


@pytest.fixture
async def report():
    noted: list[tuple[str, str, float]] = []
    classes.provide(None, None, note_server_first_cell=lambda *args: noted.append(args))
    culler = Culler()
    app = web.Application(handlers(PREFIX, lambda: culler), service=SimpleNamespace(hub_auth=Auth))
    server = HTTPServer(app)
    (port,) = free_ports(1)
    server.listen(port, "127.0.0.1")
    seq = iter(range(1, 100))

    async def post(server_name: str, first_cell: Any) -> tuple[int, Any]:
        body = {"server_name": server_name, "boot": "b", "seq": next(seq), "gpu_idle_s": 1.0, "first_cell_ago_s": first_cell}
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{PREFIX}api/activity", method="POST", headers={"Authorization": "token t"}, body=json.dumps(body)
            )
        except HTTPClientError as exc:
            response = exc.response
        return response.code, json.loads(response.body)

    post.noted = noted
    yield post
    server.stop()
    classes.provide(None, None)


async def test_a_gpu_servers_first_cell_is_noted_for_its_owner_on_the_hubs_clock(report):
    before = time.time()
    assert (await report("gpu", 90.0))[0] == 200
    assert (await report("restored", 30.0))[0] == 200
    ((user, resource, ran), (_, restored_resource, _ran)) = report.noted
    assert user == "alice" and resource == GPU and restored_resource == "nvidia.com/mig-1g.10gb"
    assert before - 90 <= ran <= time.time() - 90
    # a CPU server's cells are no GPU cells; a report without one notes nothing
    assert (await report("cpu", 5.0))[0] == 200
    assert (await report("gpu", None))[0] == 200
    assert len(report.noted) == 2


@pytest.mark.parametrize("nonsense", [-1, "soon", True, 31 * 24 * 3600])
async def test_a_nonsense_first_cell_is_a_400_that_notes_nothing(report, nonsense):
    status, refused = await report("gpu", nonsense)
    assert status == 400 and "first_cell_ago_s must be null or a number of seconds" in refused["message"]
    assert report.noted == []
