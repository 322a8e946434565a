"""The sessions' ends the queue's estimate counts on: the GPU culler's foreseen stops, and no
figure at all where nothing is known (a fake hub; the culler, store and policy are real)."""

from __future__ import annotations

import logging
import time

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.culling.culler import Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.queue import ends


class Placed:
    def __init__(self, resource: str, count: int) -> None:
        self._gb_placement = type("P", (), {"site": "origin", "resource": resource, "count": count})()
        self.user_options = {"profile": "gpu-1"}
        self.orm_spawner = None


class FakeHub:
    def __init__(self) -> None:
        self.spawners = {
            ("alice", ""): Placed("nvidia.com/gpu", 2),
            ("bob", ""): Placed("nvidia.com/gpu", 1),
            ("carol", ""): Placed("nvidia.com/mig-1g.10gb", 1),
            ("dave", ""): Placed("nvidia.com/gpu", 1),
        }

    def active_spawner(self, user, server):
        return self.spawners.get((user, server))

    def groups(self, user):
        return frozenset()


@pytest.fixture
def culler():
    config = Config()
    config.GPUCullingSettings.enabled = True
    config.GPUCullingSettings.timeout_seconds = 100
    culler = Culler(GPUCullingSettings(config=config), FakeHub(), stop_server=None, log=logging.getLogger("test-ends"))
    now = time.time()
    for user, idle in (("alice", 40.0), ("bob", 130.0), ("carol", 10.0)):
        culler.store.report(user, {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": idle}, lambda r, s: False, now)
    # dave's server never reported: nobody can say when it ends
    yield culler
    ends.provide(None)


async def test_the_cullers_foreseen_stops_are_the_known_ends_of_that_gpu_type(culler):
    assert await ends.known_ends("nvidia.com/gpu") == []  # nobody provides ends yet
    ends.provide(culler.session_ends)
    found = sorted(await ends.known_ends("nvidia.com/gpu"))
    # bob is past his limit (his GPU comes back at the next sweep); alice's 2 in about 60 s
    assert [count for _, count in found] == [1, 2]
    assert found[0][0] == 0.0 and 55 <= found[1][0] <= 60
    assert [c for _, c in await ends.known_ends("nvidia.com/mig-1g.10gb")] == [1]
    assert await ends.known_ends(None) == []


async def test_many_waiting_requests_share_one_look_a_second():
    looks = []

    async def source(resource):
        looks.append(resource)
        return [(100.0, 1)]

    ends.provide(source)
    try:
        for _ in range(50):
            found = await ends.known_ends("nvidia.com/gpu")
        assert looks == ["nvidia.com/gpu"]
        assert len(found) == 1 and 99.0 < found[0][0] <= 100.0
        await ends.known_ends("nvidia.com/mig-1g.10gb")
        assert looks == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
        ends._looked["nvidia.com/gpu"] = (time.monotonic() - ends.FRESH_S, [(100.0, 1)])
        await ends.known_ends("nvidia.com/gpu")  # a second later: looked at again
        assert looks.count("nvidia.com/gpu") == 2
    finally:
        ends.provide(None)


async def test_a_failing_source_gives_no_ends_and_the_wait_goes_on(caplog):
    async def broken(resource):
        raise RuntimeError("the culler is gone")

    ends.provide(broken)
    try:
        with caplog.at_level(logging.WARNING):
            assert await ends.known_ends("nvidia.com/gpu") == []
        assert "No session ends" in caplog.text
    finally:
        ends.provide(None)
