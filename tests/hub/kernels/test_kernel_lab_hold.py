"""The kernel API's ``held``: during a lab, a student of another class reads what the lab holds of
a GPU kernel's resource, in the lab book's own sentence (the spawn form's); the class's own
students, and everyone when no lab is on, read nothing. The user's server passes it to the launcher."""

from __future__ import annotations

import datetime as dt
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer

from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels.handlers import handlers
from jupyter_gpuburst.hub.kernels.registry import KernelRegistry
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.labs.book import LabBook
from jupyter_gpuburst.hub.labs.settings import LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore
from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.hub.queue import classes
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.server.kernels import handlers as server_kernels

PREFIX = "/services/gpuburst/"
GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
BOOKED_AT = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
IN_LAB = dt.datetime(2026, 12, 3, 10, 30, tzinfo=dt.UTC)
# each user's token is their name; sam is in the lab's class, oli in another
GROUPS = {"sam": frozenset({"ml-101"}), "oli": frozenset({"cv-200"})}
HELD = "3 GPUs are held for the lab ML-101 until 11:00."
PROFILES = {
    p.slug: p
    for p in (
        KernelProfile(slug="gpu-1", display_name="Python 3 (1 GPU)", resource=GPU, count=1),
        KernelProfile(slug="gpu-2", display_name="Python 3 (2 GPUs)", resource=GPU, count=2),
        KernelProfile(slug="mig", display_name="Python 3 (MIG)", resource=MIG, count=1),
    )
}


class Hub:
    log = logging.getLogger("test")

    def server_of_token(self, user: str, token: str) -> str | None:
        return None

    def groups(self, user: str) -> frozenset[str]:
        return GROUPS[user]

    def is_admin(self, user: str) -> bool:
        return False


class Auth:
    async def user_for_token(self, token: str, sync: bool = True) -> dict[str, Any] | None:
        scopes = ["access:services!service=gpuburst", f"custom:gpuburst:kernels!user={token}"]
        return {"kind": "user", "name": token, "scopes": scopes} if token in GROUPS else None


class Service:
    name = "gpuburst"

    def hub_auth(self) -> Auth:
        return Auth()


def federation() -> Any:
    site = SimpleNamespace(total=lambda resource: SimpleNamespace(allocatable=4 if resource == GPU else 0))
    return SimpleNamespace(sites={"origin": site})


@pytest.fixture
def lab() -> Any:
    clock = {"now": BOOKED_AT.timestamp()}
    book = LabBook(
        LabStore(":memory:"),
        LabSettings(warmup_minutes=15.0),
        dt.UTC,
        {"gpu1": (GPU, 1)},
        lambda: ["ml-101", "cv-200"],
        federation,
        clock=lambda: clock["now"],
        # one of the class's four students has taken a GPU
        class_use=lambda group, resource: 1 if (group, resource) == ("ml-101", GPU) else 0,
    )
    book.save({"title": "ML-101", "group": "ml-101", "profile": "gpu1", "students": 4, "start": "2026-12-03T10:00", "end": "11:00"}, "tina")
    book.clock_at = clock
    classes.provide(book.goes_first, book.hold_for)
    yield book
    classes.provide(None, None)


@pytest.fixture
async def listing():
    tracker = CapacityTracker(None, GPUBurstSettings(), logging.getLogger("test"))
    registry = KernelRegistry(tracker, GPUKernelSettings(), None, None, "img", "default")

    async def source(hub: Any) -> KernelRegistry:
        return registry

    server = HTTPServer(web.Application(handlers(PREFIX, source, Hub()), service=Service()))
    (port,) = free_ports(1)
    server.listen(port, "127.0.0.1")

    async def get(user: str, slugs: tuple[str, ...] = tuple(PROFILES)) -> dict[str, Any]:
        registry.profiles = {slug: PROFILES[slug] for slug in slugs}
        response = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}{PREFIX}api/kernels", headers={"Authorization": f"token {user}"})
        return json.loads(response.body)

    yield get
    server.stop()


async def test_a_student_of_another_class_reads_what_the_lab_holds(lab, listing):
    assert (await listing("oli"))["held"] == ""  # booked, not on yet
    lab.clock_at["now"] = IN_LAB.timestamp()
    # two profiles of the held resource: the sentence once
    assert (await listing("oli"))["held"] == HELD
    assert (await listing("sam"))["held"] == ""  # nothing is held from the class itself
    # a server offering only kernels of another resource meets no hold
    assert (await listing("oli", ("mig",)))["held"] == ""
    lab.clock_at["now"] = (IN_LAB + dt.timedelta(hours=1)).timestamp()  # the lab is over
    assert (await listing("oli"))["held"] == ""


async def test_without_lab_bookings_nothing_is_held(listing):
    assert (await listing("oli"))["held"] == ""


@pytest.mark.parametrize(("sent", "passed"), [(HELD, HELD), ("", ""), (None, ""), (3, "")])
async def test_the_users_server_passes_the_sentence_to_the_launcher(monkeypatch, sent, passed):
    class Client:
        async def request(self, method: str, path: str, timeout: float) -> tuple[int, Any]:
            return 200, {"profiles": [], "budget": "", **({} if sent is None else {"held": sent})}

    monkeypatch.setattr(server_kernels, "client_from_env", Client)
    assert (await server_kernels.fetch_profiles_now())["held"] == passed
