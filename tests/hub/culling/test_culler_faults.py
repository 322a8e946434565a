"""The culler when things go wrong: a target already gone, a failing stop, a hub that restarted
mid-cull, donors first. A fake hub; the culler, store and policy are the real ones."""

from __future__ import annotations

import logging

from traitlets.config import Config

from jupyter_gpuburst.hub.culling.culler import Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings

NOW = 1_000_000.0


class FakeSpawner:
    def __init__(self, site: str) -> None:
        self._gb_placement = type("P", (), {"site": site, "count": 1})()
        self.user_options = {"profile": "gpu-1"}
        self.orm_spawner = None


class FakeHub:
    def __init__(self) -> None:
        self.spawners = {("alice", ""): FakeSpawner("origin"), ("bob", ""): FakeSpawner("donor-1")}

    def active_spawner(self, user, server):
        return self.spawners.get((user, server))

    def groups(self, user):
        return frozenset()


def culler(stop):
    config = Config()
    config.GPUCullingSettings.enabled = True
    config.GPUCullingSettings.timeout_seconds = 100
    config.GPUCullingSettings.warning_seconds = 10
    config.GPUCullingSettings.period_seconds = 5
    return Culler(GPUCullingSettings(config=config), FakeHub(), stop_server=stop, log=logging.getLogger("test-culler"))


def report(c: Culler, user: str, idle: float, now: float, seq: int = 1) -> None:
    c.store.report(user, {"server_name": "", "boot": "b", "seq": seq, "gpu_idle_s": idle}, lambda r, s: False, now)


async def test_a_first_report_already_past_the_limit_is_warned_before_it_is_stopped(caplog):
    stops = []

    async def stop(user, server):
        stops.append(user)
        return "stopped"

    c = culler(stop)
    # a hub that restarted mid-cull knows nothing until servers report; this one is long idle
    report(c, "alice", 5000.0, NOW)
    with caplog.at_level(logging.INFO, "test-culler"):
        assert await c.sweep(NOW) == []
    assert "warning alice first" in caplog.text
    reply = await c.reply("alice", "", NOW + 1)
    assert reply["targets"][0]["state"] == "stop" and reply["targets"][0]["warned"]
    report(c, "alice", 5005.0, NOW + 5, seq=2)
    assert [s["user"] for s in await c.sweep(NOW + 5)] == ["alice"]
    assert stops == ["alice"]


async def test_donors_go_first_a_failing_stop_is_logged_and_a_gone_server_is_dropped(caplog):
    order = []

    async def stop(user, server):
        order.append(user)
        if user == "bob":
            raise RuntimeError("the hub refused")
        return "gone"

    c = culler(stop)
    for user in ("alice", "bob"):
        report(c, user, 95.0, NOW)
    await c.sweep(NOW)  # both warned
    for user in ("alice", "bob"):
        report(c, user, 200.0, NOW + 10, seq=2)
    with caplog.at_level(logging.INFO, "test-culler"):
        assert await c.sweep(NOW + 10) == []
    assert order == ["bob", "alice"]  # the donor's GPU first
    assert "stopping bob's server '' failed" in caplog.text
    assert "alice's server '' was already stopped" in caplog.text
    # the failed stop is tried again; the gone one is not
    report(c, "bob", 210.0, NOW + 15, seq=3)
    with caplog.at_level(logging.INFO, "test-culler"):
        await c.sweep(NOW + 15)
    assert order == ["bob", "alice", "bob"]


async def test_a_server_that_went_silent_is_kept_until_the_silence_limit_and_said_once(caplog):
    async def stop(user, server):
        raise AssertionError("nothing is stopped on a guess")

    c = culler(stop)
    report(c, "alice", 50.0, NOW)
    with caplog.at_level(logging.WARNING, "test-culler"):
        await c.sweep(NOW + 1000)
        await c.sweep(NOW + 1005)
    # idle for 17 min, if it were still telling; silent for less than the 30 min limit
    assert caplog.text.count("its GPU state is unknown (stopped once silent for 30 min)") == 1


async def test_a_gpu_busy_again_after_a_warning_needs_a_new_warning_before_a_stop():
    stops = []

    async def stop(user, server):
        stops.append(user)
        return "stopped"

    c = culler(stop)
    report(c, "alice", 95.0, NOW)
    await c.sweep(NOW)
    assert c.store.get("alice", "", "server").warned_at == NOW
    report(c, "alice", 0.0, NOW + 5, seq=2)  # the student ran a cell
    await c.sweep(NOW + 5)
    assert c.store.get("alice", "", "server").warned_at is None
    # a first report past the limit again (a long pause): warned first, not stopped at once
    report(c, "alice", 500.0, NOW + 10, seq=3)
    assert await c.sweep(NOW + 10) == [] and stops == []


class FakeRecord:
    id = "r1"
    user = "alice"
    state = "running"
    server_name = ""
    created = NOW - 100
    profile = type("P", (), {"slug": "gpu-1"})()
    placement = type("Pl", (), {"site": "origin"})()


class FakeRegistry:
    def __init__(self) -> None:
        self.records = {"r1": FakeRecord()}
        self.stopped: list[str] = []

    def get(self, user, record_id):
        if record_id not in self.records:
            raise KeyError(record_id)
        return self.records[record_id]

    async def stop(self, record, wait=0.0):
        self.stopped.append("r1")
        self.records.pop("r1", None)

    def all_records(self):
        return list(self.records.values())


async def test_a_gpu_kernel_is_shut_down_by_its_server_first_and_by_the_hub_when_it_does_not():
    registry = FakeRegistry()

    async def source(hub):
        return registry

    c = culler(None)
    c.registry_source = source
    kernels = {"r1": {"idle_s": 95.0, "kernel_id": "k1"}}
    c.store.report(
        "alice", {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": None, "kernels": kernels}, lambda r, s: r in registry.records, NOW
    )
    await c.sweep(NOW)  # warned
    kernels["r1"]["idle_s"] = 200.0
    c.store.report("alice", {"server_name": "", "boot": "b", "seq": 2, "gpu_idle_s": None, "kernels": kernels}, lambda r, s: True, NOW + 10)
    await c.sweep(NOW + 10)
    # the server hears first; its restarter may not start the kernel again meanwhile
    assert registry.stopped == [] and "idle" in (c.store.refuses_start("alice", "", "k1") or "")
    reply = await c.reply("alice", "", NOW + 11)
    assert [s["kernel_id"] for s in reply["stopped"]] == ["k1"]
    assert c.store.refuses_start("alice", "", "k1") is None  # heard: a student's restart works
    # a server that did not shut it down: the hub deletes the pod two periods later
    await c.sweep(NOW + 15)
    assert registry.stopped == []
    await c.sweep(NOW + 21)
    assert registry.stopped == ["r1"]


async def test_the_next_sweep_comes_when_the_next_warning_or_stop_falls_due_not_a_period_later():
    async def stop(user, server):
        return "stopped"

    c = culler(stop)  # timeout 100 s, warning 10 s, period 5 s
    assert c.next_sweep_s == 5
    report(c, "alice", 88.0, NOW)  # the warning is due in 2 s
    await c.sweep(NOW)
    assert abs(c.next_sweep_s - 2) < 0.1
    await c.sweep(NOW + 2.05)  # warned: the stop is due 10 s after the warning's due time
    assert c.store.get("alice", "", "server").warned_at == NOW + 2.05
    assert c.next_sweep_s == 5  # the period comes first
    assert await c.sweep(NOW + 11.5) == []
    assert abs(c.next_sweep_s - 0.5) < 0.1  # 12 s of idleness from the report: the stop
    report(c, "alice", 100.0, NOW + 12, seq=2)
    assert [s["user"] for s in await c.sweep(NOW + 12.02)] == ["alice"]
    # asked for: retried once a period, never spun on
    assert c.next_sweep_s == 5


async def test_stops_run_side_by_side_and_a_stop_under_way_is_not_asked_for_again():
    import asyncio

    began: list[str] = []
    release = asyncio.Event()

    async def stop(user, server):
        began.append(user)
        await release.wait()  # JupyterHub answers once the server is gone: slow under load
        return "stopped"

    c = culler(stop)
    for user in ("alice", "bob"):
        report(c, user, 91.0, NOW)
    await c.sweep(NOW)  # both warned
    for user in ("alice", "bob"):
        report(c, user, 100.0, NOW + 11, seq=2)
    first = asyncio.ensure_future(c.sweep(NOW + 11))
    for _ in range(50):
        if len(began) == 2:
            break
        await asyncio.sleep(0.01)
    assert began == ["bob", "alice"]  # both begun before either ended; the donor's first
    assert await c.sweep(NOW + 12, wait=False) == [] and began == ["bob", "alice"]
    release.set()
    assert sorted(s["user"] for s in await first) == ["alice", "bob"]
