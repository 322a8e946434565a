"""Limits from the hub's own facts: a GPU server whose report is disabled (it never reports) still
meets its budget, its maximum age and the silence limit; forged "busy" reports keep no GPU past the
maximum age, even from a server that hears its kernel's stop and ignores it; a GPU kernel no server
reports is found in the hub's records, counted against its owner's budget and reaped. A fake hub,
registry and budget; the culler, store, policy and budget watch are the real ones."""

from __future__ import annotations

import datetime
import logging
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.culling.budget import BudgetRule, BudgetWatch
from jupyter_gpuburst.hub.culling.culler import Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings

NOW = 1_000_000.0
PERIOD = 60.0
WARNING = 600.0
GRACE = 300.0


def spawner(gpus: int, started: float | None = None) -> SimpleNamespace:
    when = None if started is None else datetime.datetime.fromtimestamp(started, datetime.timezone.utc).replace(tzinfo=None)
    return SimpleNamespace(
        _gb_placement=SimpleNamespace(site="origin", count=gpus) if gpus else None,
        user_options={"profile": "gpu-1" if gpus else "cpu"},
        orm_spawner=SimpleNamespace(started=when),
        user=SimpleNamespace(admin=False),
    )


class FakeHub:
    """The hub's spawners; ``running`` is what ``running_servers()`` reads in a real hub."""

    def __init__(self, **spawners: SimpleNamespace) -> None:
        self.spawners = {(user, ""): s for user, s in spawners.items()}

    def running(self) -> list[tuple[str, str]]:
        return list(self.spawners)

    def active_spawner(self, user, server):
        return self.spawners.get((user, server))

    def groups(self, user):
        return frozenset()


class FakeRegistry:
    def __init__(self, *records: SimpleNamespace) -> None:
        self.records = {r.id: r for r in records}
        self.stopped: list[str] = []

    def get(self, user, record_id):
        record = self.records.get(record_id)
        if record is None or record.user != user:
            raise KeyError(record_id)
        return record

    def all_records(self):
        return list(self.records.values())

    async def stop(self, record, wait=0.0):
        self.stopped.append(record.id)
        self.records.pop(record.id, None)


def kernel(record_id: str, user: str, created: float) -> SimpleNamespace:
    return SimpleNamespace(
        id=record_id,
        user=user,
        server_name="",
        kernel_id="",
        state="running",
        created=created,
        profile=SimpleNamespace(slug="gpu-1"),
        placement=SimpleNamespace(site="origin"),
    )


class Budgets:
    def __init__(self, *used_up: str) -> None:
        self.used_up = set(used_up)
        self.asked: list[str] = []

    async def status_of(self, user, groups, admin):
        self.asked.append(user)
        return SimpleNamespace(exhausted=user in self.used_up, sentence=lambda: "0 of 20 GPU-hours left this week")


def culler(hub: FakeHub, stops: list, *, registry: FakeRegistry | None = None, budgets: Budgets | None = None, **culling) -> Culler:
    config = Config()
    config.GPUCullingSettings.period_seconds = PERIOD
    config.GPUCullingSettings.warning_seconds = WARNING
    for key, value in culling.items():
        config.GPUCullingSettings[key] = value

    async def stop_server(user, server):
        stops.append(user)
        return "stopped"

    async def registry_source(_hub):
        return registry

    log = logging.getLogger("test-hub-facts")
    watch = BudgetWatch(BudgetRule(stop=True, grace_s=GRACE), budgets.status_of, log) if budgets is not None else None
    return Culler(
        GPUCullingSettings(config=config),
        hub,
        registry_source if registry is not None else None,
        stop_server=stop_server,
        log=log,
        budgets=watch,
        servers=hub.running,
    )


def report(c: Culler, user: str, now: float, seq: int, idle: float | None = 0.0, kernels: dict | None = None) -> None:
    body = {"server_name": "", "boot": "forged", "seq": seq, "gpu_idle_s": idle, "kernels": kernels or {}}
    c.store.report(user, body, lambda record_id, server: True, now)


async def test_a_gpu_server_that_never_reports_is_stopped_at_its_budget():
    stops: list[str] = []
    budgets = Budgets("alice", "carol")
    # idle culling off: only the budget stops; carol's CPU server holds no GPU-hours
    c = culler(FakeHub(alice=spawner(1, NOW - 60), carol=spawner(0, NOW - 60)), stops, budgets=budgets)
    assert await c.sweep(NOW) == []
    assert budgets.asked == ["alice"]
    (item,) = (await c.reply("alice", "", NOW))["targets"]
    assert item["state"] == "warn" and item["cause"] == "budget"
    assert await c.sweep(NOW + GRACE - 1) == [] and stops == []
    (done,) = await c.sweep(NOW + GRACE)
    assert done["user"] == "alice" and done["cause"] == "budget" and stops == ["alice"]


async def test_a_gpu_server_that_never_reports_is_stopped_at_its_maximum_age(caplog):
    stops: list[str] = []
    c = culler(FakeHub(alice=spawner(1, NOW - 3500)), stops, enabled=True, max_age_seconds=3600)
    with caplog.at_level(logging.INFO, "test-hub-facts"):
        assert await c.sweep(NOW) == []  # 100 s before its maximum age: warned
    assert "warning alice: server '' stops in 100 s (it reached the maximum age of 1 h" in caplog.text
    (done,) = await c.sweep(NOW + 100)
    assert done["cause"] == "age" and stops == ["alice"]
    assert c.stopped_servers[("alice", "")][0].startswith("Your server was stopped because it reached the maximum age of 1 h")


async def test_a_gpu_server_that_never_reports_is_stopped_at_the_silence_limit_unless_it_is_zero(caplog):
    stops: list[str] = []
    hub = FakeHub(alice=spawner(1, NOW - 60), carol=spawner(0, NOW - 60))
    c = culler(hub, stops, enabled=True, silent_seconds=1800)
    with caplog.at_level(logging.WARNING, "test-hub-facts"):
        await c.sweep(NOW)  # found now: silent from here
    assert "alice's server '' for 0 s; its GPU state is unknown (stopped once silent for 30 min)" in caplog.text
    assert "carol" not in caplog.text  # a CPU server is no target of its own
    await c.sweep(NOW + 1199)
    assert c.store.get("alice", "", "server").warned_at is None
    await c.sweep(NOW + 1200)
    (item,) = (await c.reply("alice", "", NOW + 1200))["targets"]
    assert item["state"] == "warn" and item["cause"] == "silent" and not item["keepable"]
    (done,) = await c.sweep(NOW + 1800)
    assert done["cause"] == "silent" and stops == ["alice"]

    kept: list[str] = []
    c = culler(FakeHub(alice=spawner(1, NOW - 60)), kept, enabled=True, silent_seconds=0)
    await c.sweep(NOW)
    assert await c.sweep(NOW + 1e6) == [] and kept == []


async def test_forged_busy_reports_keep_no_gpu_past_the_maximum_age():
    stops: list[str] = []
    registry = FakeRegistry(kernel("r1", "alice", NOW - 3500))
    hub = FakeHub(alice=spawner(1, NOW - 3500))
    c = culler(hub, stops, registry=registry, enabled=True, max_age_seconds=3600)
    busy = {"r1": {"idle_s": 0.0, "kernel_id": "k1"}}
    # "busy" for the server and its kernel, every period, whatever the GPUs do
    report(c, "alice", NOW, 1, kernels=busy)
    await c.sweep(NOW)  # both warned: 100 s to their maximum age
    report(c, "alice", NOW + 100, 2, kernels=busy)
    (done,) = await c.sweep(NOW + 100)
    assert done["target"] == "server" and done["cause"] == "age" and stops == ["alice"]


async def test_forged_busy_reports_and_an_ignored_stop_keep_no_gpu_kernel_past_the_maximum_age():
    registry = FakeRegistry(kernel("r1", "alice", NOW - 3500))
    c = culler(FakeHub(alice=spawner(1, NOW - 60)), [], registry=registry, enabled=True, max_age_seconds=3600)
    report(c, "alice", NOW, 1, kernels={"r1": {"idle_s": 0.0, "kernel_id": "k1"}})
    await c.sweep(NOW)  # warned: 100 s to its maximum age
    report(c, "alice", NOW + 100, 2, kernels={"r1": {"idle_s": 0.0, "kernel_id": "k1"}})
    await c.sweep(NOW + 100)
    # the server is asked first; this one hears, keeps the kernel running and stops reporting it
    (heard,) = (await c.reply("alice", "", NOW + 101))["stopped"]
    assert heard["kernel_id"] == "k1" and "maximum age" in heard["reason"]
    report(c, "alice", NOW + 100 + PERIOD, 3)
    await c.sweep(NOW + 100 + PERIOD)
    assert registry.stopped == []
    # two periods after it was asked, the hub deletes the kernel's pod itself
    report(c, "alice", NOW + 100 + 2 * PERIOD, 4)
    (done,) = await c.sweep(NOW + 100 + 2 * PERIOD)
    assert done["target"] == "r1" and registry.stopped == ["r1"]


async def test_a_gpu_kernel_no_server_reports_is_found_billed_to_its_owner_and_reaped():
    stops: list[str] = []
    # carol's CPU server reports (itself only); the hub started a GPU kernel for it that the
    # server never heard of (the hub restarted before answering): only the pod watch knows it
    registry = FakeRegistry(kernel("orphan", "carol", NOW - 60))
    budgets = Budgets()
    c = culler(FakeHub(carol=spawner(0, NOW - 600)), stops, registry=registry, budgets=budgets, enabled=True, silent_seconds=1800)
    report(c, "carol", NOW, 1, idle=None)
    await c.sweep(NOW)
    assert budgets.asked == ["carol"]  # its GPU-hours are carol's: her budget holds it
    seq = 2
    for t in range(int(NOW + PERIOD), int(NOW + 1800), int(PERIOD)):
        report(c, "carol", t, seq, idle=None)
        seq += 1
        await c.sweep(t)
        assert registry.stopped == [], t
    report(c, "carol", NOW + 1800, seq, idle=None)
    (done,) = await c.sweep(NOW + 1800)
    # nobody to tell: its pod goes at once
    assert done["target"] == "orphan" and done["cause"] == "silent" and registry.stopped == ["orphan"]
    assert stops == []  # carol's server runs on


async def test_an_unreported_gpu_kernel_of_a_user_over_budget_is_stopped_at_the_budget():
    registry = FakeRegistry(kernel("orphan", "carol", NOW - 60))
    c = culler(FakeHub(carol=spawner(0, NOW - 600)), [], registry=registry, budgets=Budgets("carol"))
    await c.sweep(NOW)
    assert registry.stopped == []
    (done,) = await c.sweep(NOW + GRACE)
    assert done["cause"] == "budget" and registry.stopped == ["orphan"]


@pytest.mark.parametrize("state", ["failed", "stopped"])
async def test_a_kernel_record_that_holds_no_gpu_is_no_target(state):
    record = kernel("gone", "carol", NOW - 60)
    record.state = state
    c = culler(FakeHub(carol=spawner(0, NOW - 600)), [], registry=FakeRegistry(record), budgets=Budgets("carol"))
    await c.sweep(NOW)
    assert (await c.reply("carol", "", NOW))["targets"] == []
