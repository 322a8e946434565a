"""install(c) gives the same warm pools whether ``c.WarmPools`` stands before it in
jupyterhub_config.py or after it: the hub starts the pools from its whole config, and a bad
pool stops it, with the reason, either way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.culling import live as culling
from jupyter_gpuburst.hub.labs import live as labs
from jupyter_gpuburst.hub.pools import live
from jupyter_gpuburst.hub.service import CapacityService

HUB_CONFIG = Path(__file__).resolve().parents[3] / "hub_config" / "jupyterhub_config.py"
POOLS = """
c.WarmPools.timezone = "Europe/Rome"
c.WarmPools.pools = [
    {"site": "origin", "profile": "gpu-1", "count": 2, "schedule": ["mon-fri 08:30-09:15"]},
    {"site": "polito-hpc", "profile": "mig-1g", "count": 1},
]
c.WarmPools.kernels = [{"site": "origin", "profile": "gpu-1", "count": 1}]
c.WarmPools.interval_seconds = 2.0
"""
BAD_POOL = 'c.WarmPools.pools = [{"site": "origin", "profile": "gpu-9", "count": 1}]\n'


class FakeHub:
    """What of a starting hub the config's load meets: its config, and who observes it."""

    tornado_settings = {"users": {}}

    def observe(self, handler, names) -> None:
        self.observers.append(handler)

    def unobserve(self, handler, names) -> None:
        self.observers.remove(handler)


HUB = FakeHub()


def load(texts: list[str]) -> Config:
    """The texts in this order into one config, as JupyterHub's loader (and load_subconfig) do."""
    c = Config()
    for text in texts:
        exec(f"c = get_config()\n{text}", {"get_config": lambda: c, "__name__": "jupyterhub_config"})  # noqa: S102 - the admin's own config
    return c


async def start(texts: list[str]) -> tuple[Config, list[dict[str, Any]]]:
    """Load the texts as a starting hub does (in its running loop), let the loop run what
    install(c) left for the hub's start, and say which pools started."""
    started: list[dict[str, Any]] = []

    async def pools_start(settings, shapes, namespace, tracker_source, kernel_pods, booked=None, kernel_pod_for=None):
        pods = {name: await build() for name, build in kernel_pods.items()}  # as the admin's hook leaves them
        started.append(
            {
                "pools": settings.pools,
                "kernels": settings.kernels,
                "timezone": settings.timezone,
                "interval": settings.interval_seconds,
                "shapes": shapes,
                "namespace": namespace,
                "kernel images": {name: pod["spec"]["containers"][0]["image"] for name, pod in pods.items()},
            }
        )

    live._start = pools_start
    c = load(texts)
    for check in list(HUB.observers):  # the hub sets its config from the whole file
        check({"name": "template_paths"})
    for _ in range(10):  # the hub's start: its loop runs what install(c) scheduled
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    return c, started


@pytest.fixture
def hub_start(monkeypatch):
    monkeypatch.setattr(CapacityService, "start", lambda self: None)  # no port taken
    monkeypatch.setattr(live, "_start", live._start)  # restored after
    monkeypatch.setattr(culling, "hub_culler", lambda token: None)

    async def no_book(c, tracker_source):  # the lab book needs a cluster; the pools do not here
        return None

    monkeypatch.setattr(labs, "_open", no_book)
    # a hub with no config of its own beyond the file's
    HUB.config, HUB.observers = Config(), []
    fake = SimpleNamespace(instance=lambda: HUB, initialized=lambda: True)
    monkeypatch.setattr(live, "JupyterHub", fake, raising=False)
    monkeypatch.setattr(culling, "JupyterHub", fake)


def roles_of(c: Config) -> list:
    value = c.JupyterHub.load_roles
    return list(value) if isinstance(value, list | tuple) else value.get_value([])


def test_pool_settings_before_or_after_install_give_the_same_pools(hub_start):
    example = HUB_CONFIG.read_text()
    before, before_started = asyncio.run(start([POOLS, example]))
    after, after_started = asyncio.run(start([example, POOLS]))
    assert before_started == after_started
    (started,) = after_started
    assert [p["profile"] for p in started["pools"]] == ["gpu-1", "mig-1g"] and started["timezone"] == "Europe/Rome"
    assert set(started["shapes"]) >= {"gpu-1", "mig-1g"} and started["namespace"] == "jhub-users"
    assert set(started["kernel images"]) == {"origin.gpu-1.kernels"}
    service_roles = [
        [(r["name"], sorted(r["scopes"])) for r in roles_of(c) if "gpuburst" in r.get("services", [])] for c in (before, after)
    ]
    assert service_roles[0] == service_roles[1] and service_roles[0]


def test_without_pool_settings_the_pools_start_empty(hub_start):
    # lab bookings may ask for pools at any time: the controller runs, with none of its own
    _, started = asyncio.run(start([HUB_CONFIG.read_text()]))
    assert [(s["pools"], s["kernels"]) for s in started] == [([], [])]


@pytest.mark.parametrize("order", ["before", "after"])
def test_a_bad_pool_stops_the_hub_with_the_reason_wherever_it_stands(hub_start, order):
    example = HUB_CONFIG.read_text()
    texts = [BAD_POOL, example] if order == "before" else [example, BAD_POOL]
    # before: install(c) itself refuses it; after: the hub's reading of the whole file does
    with pytest.raises(ValueError, match="^WarmPools.pools: no profile 'gpu-9' in the spawner's profile_list$"):
        asyncio.run(start(texts))
