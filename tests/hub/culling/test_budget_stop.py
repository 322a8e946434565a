"""A running GPU session whose user's GPU-hour budget is used up is warned, then stopped like an
idle one; a grant before the stop cancels it; admins, CPU servers and "warn only" are left
running. A fake hub and budget; the culler, store and policy are the real ones."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.culling.budget import BudgetRule, BudgetWatch
from jupyter_gpuburst.hub.culling.culler import Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings

NOW = 1_000_000.0
GRACE = 600.0
PERIOD = 60.0
SENTENCE = "0 of 20 GPU-hours left this week, resets Monday 00:00 UTC"


class FakeSpawner:
    def __init__(self, gpus: int, admin: bool = False) -> None:
        self._gb_placement = SimpleNamespace(site="origin", count=gpus) if gpus else None
        self.user_options = {"profile": "gpu-1" if gpus else "cpu"}
        self.orm_spawner = None
        self.user = SimpleNamespace(admin=admin)


class FakeHub:
    def __init__(self) -> None:
        self.spawners = {
            ("alice", ""): FakeSpawner(1),
            ("carol", ""): FakeSpawner(0),  # a CPU server: no GPU-hours to stop
            ("root", ""): FakeSpawner(1, admin=True),
            ("dave", ""): FakeSpawner(0),
        }
        # dave's GPU server from before a hub restart: only its saved placement says it has a GPU
        self.spawners[("dave", "")].gpuburst_placement = {"site": "donor-1", "count": 2}

    def active_spawner(self, user, server):
        return self.spawners.get((user, server))

    def groups(self, user):
        return frozenset()


class Budgets:
    """Who is over budget now; an admin's grant takes a user off."""

    def __init__(self, *used_up: str) -> None:
        self.used_up = set(used_up)
        self.asked: list[str] = []

    async def status_of(self, user, groups, admin):
        self.asked.append(user)
        return SimpleNamespace(exhausted=user in self.used_up, sentence=lambda: SENTENCE)


def culler(budgets: Budgets, stops: list, *, culling: bool = False, stop: bool = True) -> Culler:
    config = Config()
    config.GPUCullingSettings.enabled = culling
    config.GPUCullingSettings.period_seconds = PERIOD

    async def stop_server(user, server):
        stops.append(user)
        return "stopped"

    watch = BudgetWatch(BudgetRule(stop=stop, grace_s=GRACE), budgets.status_of, logging.getLogger("test-budget"))
    return Culler(
        GPUCullingSettings(config=config), FakeHub(), stop_server=stop_server, log=logging.getLogger("test-budget"), budgets=watch
    )


def report(c: Culler, user: str, now: float, seq: int, idle: float | None = None) -> None:
    # culling off: the server samples nothing and reports no GPU idle time
    c.store.report(user, {"server_name": "", "boot": "b", "seq": seq, "gpu_idle_s": idle}, lambda r, s: False, now)


@pytest.mark.parametrize("culling", [False, True], ids=["culling-off", "culling-on"])
async def test_over_budget_a_gpu_server_is_warned_then_stopped(culling):
    stops: list[str] = []
    c = culler(Budgets("alice", "carol", "root", "dave"), stops, culling=culling)
    for user in ("alice", "carol", "root", "dave"):
        report(c, user, NOW, 1, idle=0.0 if culling else None)
    assert await c.sweep(NOW) == []
    (item,) = (await c.reply("alice", "", NOW + 1))["targets"]
    assert item["state"] == "warn" and item["cause"] == "budget" and item["warned"]
    assert item["stops_in_s"] == pytest.approx(GRACE - 1)
    assert not item["keepable"]  # no Keep: only hours help
    assert item["reason"] == f"your GPU-hour budget is used up ({SENTENCE})"
    (restored,) = (await c.reply("dave", "", NOW + 1))["targets"]
    assert restored["state"] == "warn" and restored["cause"] == "budget"
    # the admin and the CPU server are not even warned
    for user in ("carol", "root"):
        (other,) = (await c.reply(user, "", NOW + 1))["targets"]
        assert other["state"] != "warn" and other["cause"] != "budget"

    for seq, t in enumerate(range(int(NOW + PERIOD), int(NOW + GRACE), int(PERIOD)), start=2):
        report(c, "alice", t, seq, idle=0.0 if culling else None)
        assert await c.sweep(t) == []
    report(c, "alice", NOW + GRACE, 99, idle=0.0 if culling else None)
    done = await c.sweep(NOW + GRACE)
    assert {d["user"] for d in done} == {"alice", "dave"} and {d["cause"] for d in done} == {"budget"}
    # dave's server went silent after its warning: its idleness is unknown, its GPU-hours are not
    assert sorted(stops) == ["alice", "dave"]
    note = c.stopped_servers[("alice", "")][0]
    assert note == f"Your server was stopped because your GPU-hour budget is used up ({SENTENCE}). Ask the hub's admins for more hours."


async def test_a_grant_before_the_stop_cancels_it():
    stops: list[str] = []
    budgets = Budgets("alice")
    c = culler(budgets, stops)
    report(c, "alice", NOW, 1)
    await c.sweep(NOW)
    assert (await c.reply("alice", "", NOW))["targets"][0]["state"] == "warn"
    budgets.used_up.clear()  # an admin's POST .../budgets/grants
    report(c, "alice", NOW + PERIOD, 2)
    await c.sweep(NOW + PERIOD)
    (item,) = (await c.reply("alice", "", NOW + PERIOD))["targets"]
    assert item["state"] != "warn" and not item["warned"]
    report(c, "alice", NOW + 2 * GRACE, 3)
    assert await c.sweep(NOW + 2 * GRACE) == [] and stops == []
    # used up again later: a new warning, and a whole grace again before the stop
    budgets.used_up.add("alice")
    report(c, "alice", NOW + 3 * GRACE, 4)
    await c.sweep(NOW + 3 * GRACE)
    assert (await c.reply("alice", "", NOW + 3 * GRACE))["targets"][0]["stops_in_s"] == pytest.approx(GRACE)


async def test_warn_only_keeps_the_session_running():
    stops: list[str] = []
    c = culler(Budgets("alice"), stops, stop=False)
    report(c, "alice", NOW, 1)
    await c.sweep(NOW)
    report(c, "alice", NOW + 10 * GRACE, 2)
    assert await c.sweep(NOW + 10 * GRACE) == [] and stops == []
    (item,) = (await c.reply("alice", "", NOW + 10 * GRACE))["targets"]
    assert item["state"] == "warn" and item["cause"] == "budget" and item["stops_in_s"] is None


async def test_an_idle_stop_that_comes_first_keeps_its_own_reason():
    stops: list[str] = []
    c = culler(Budgets("alice"), stops, culling=True)
    c.settings.timeout_seconds = 3600.0
    c.settings.warning_seconds = 600.0
    report(c, "alice", NOW, 1, idle=3500.0)  # idle stop in 100 s, budget stop in 600 s
    await c.sweep(NOW)
    (item,) = (await c.reply("alice", "", NOW))["targets"]
    assert item["cause"] == "idle" and item["keepable"] and item["stops_in_s"] == pytest.approx(100.0)


async def test_a_budget_that_cannot_be_read_stops_nothing(caplog):
    stops: list[str] = []

    async def broken(user, groups, admin):
        raise OSError("ledger locked")

    c = culler(Budgets(), stops)
    c.budgets.status_of = broken
    report(c, "alice", NOW, 1)
    with caplog.at_level(logging.WARNING, "test-budget"):
        await c.sweep(NOW)
    assert "could not read alice's budget" in caplog.text
    report(c, "alice", NOW + 2 * GRACE, 2)
    assert await c.sweep(NOW + 2 * GRACE) == [] and stops == []


async def test_over_budget_a_gpu_kernel_is_stopped_and_its_notebook_hears_why():
    record = SimpleNamespace(
        id="rec-1",
        user="carol",
        state="running",
        server_name="",
        placement=SimpleNamespace(site="donor-1"),
        profile=SimpleNamespace(slug="gpu-1"),
        created=NOW - 100,
    )

    class Registry:
        stopped: list = []

        def get(self, user, record_id):
            return record

        async def stop(self, rec, wait=0):
            self.stopped.append(rec)

        def all_records(self):
            return [record]

    registry = Registry()

    async def registry_source(hub):
        return registry

    stops: list[str] = []
    c = culler(Budgets("carol"), stops)  # carol's server is a CPU one: her GPU is the kernel
    c.registry_source = registry_source
    body = {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": None, "kernels": {"rec-1": {"kernel_id": "k-1", "idle_s": 0.0}}}
    c.store.report("carol", body, lambda r, s: True, NOW)
    await c.sweep(NOW)
    targets = {t["kind"]: t for t in (await c.reply("carol", "", NOW))["targets"]}
    assert targets["kernel"]["state"] == "warn" and targets["kernel"]["cause"] == "budget"
    assert targets["server"]["state"] != "warn"  # the CPU server holds no GPU-hours
    await c.sweep(NOW + GRACE)
    (stopped,) = (await c.reply("carol", "", NOW + GRACE))["stopped"]
    assert stopped["kernel_id"] == "k-1"
    assert stopped["reason"] == (
        f"This GPU kernel was stopped because your GPU-hour budget is used up ({SENTENCE}). Ask the hub's admins for more hours."
    )
    assert stops == []  # the server runs on


async def test_budgets_are_read_once_a_period_however_often_the_culler_sweeps():
    # sweeps also run whenever a warning or stop is due; each budget read asks the ledger about
    # every watched user, so it happens once a period
    budgets, stops = Budgets("alice"), []
    c = culler(budgets, stops)
    report(c, "alice", NOW, 1)
    await c.sweep(NOW)
    await c.sweep(NOW + 1)
    await c.sweep(NOW + PERIOD / 2)
    assert budgets.asked == ["alice"]
    await c.sweep(NOW + PERIOD)
    assert budgets.asked == ["alice", "alice"]
