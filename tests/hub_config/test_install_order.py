"""install(c) gives the same hub whether the feature settings (hub_config/accounting.py,
hub_config/culling_config.py) come before it in jupyterhub_config.py or after it, as
accounting.py's own docstring has them: the service's roles, the culler's start and the
ledger's idle signal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.accounting import wiring
from jupyter_gpuburst.hub.culling import live
from jupyter_gpuburst.hub.service import CapacityService

HUB_CONFIG = Path(__file__).resolve().parents[2] / "hub_config"
FEATURES = ["accounting.py", "culling_config.py"]


def roles_of(c) -> list:
    """The roles JupyterHub loads from ``c``: a list, or additions to whatever else sets it."""
    value = c.JupyterHub.load_roles
    return list(value) if isinstance(value, list | tuple) else value.get_value([])


def load(names: list[str]) -> Config:
    """The files in this order into one config, as JupyterHub's loader (and load_subconfig) do."""
    c = Config()
    for name in names:
        exec((HUB_CONFIG / name).read_text(), {"get_config": lambda: c, "__name__": name})  # noqa: S102 - the admin's own config files
    return c


async def start(names: list[str]) -> tuple[Config, dict[str, Any]]:
    """Load the files as a starting hub does (in its running loop), let the loop run what
    install(c) left for the hub's start, and say what got wired."""
    wiring.use_idle_source(None)
    started: list[str] = []
    live.hub_culler = lambda token: started.append("culler")
    c = load(names)
    for _ in range(10):  # the hub's start: its loop runs what install(c) scheduled
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    return c, {"idle source": wiring._idle_source, "culler": started}


@pytest.fixture
def hub_start(monkeypatch):
    monkeypatch.setattr(CapacityService, "start", lambda self: None)  # no port taken
    monkeypatch.setattr(live, "hub_culler", live.hub_culler)  # restored after
    # a hub whose users are loaded, with no config of its own beyond the file's
    hub = SimpleNamespace(tornado_settings={"users": {}}, config=Config())
    monkeypatch.setattr(live, "JupyterHub", SimpleNamespace(instance=lambda: hub, initialized=lambda: True))
    yield
    wiring.use_idle_source(None)


def test_feature_settings_before_or_after_install_give_the_same_hub(hub_start):
    before, before_wired = asyncio.run(start([*FEATURES, "jupyterhub_config.py"]))
    after, after_wired = asyncio.run(start(["jupyterhub_config.py", *FEATURES]))
    gpuburst_roles = [sorted(r["scopes"]) for c in (before, after) for r in roles_of(c) if "gpuburst" in r.get("services", [])]
    assert gpuburst_roles[0] == gpuburst_roles[1] and ["delete:servers", "read:users:name"] in gpuburst_roles
    assert before_wired == after_wired
    assert after_wired == {"idle source": live.idle_since, "culler": ["culler"]}


def test_without_the_features_nothing_is_wired(hub_start):
    _, wired = asyncio.run(start(["jupyterhub_config.py"]))
    assert wired == {"idle source": None, "culler": []}
