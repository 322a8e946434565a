"""A real JupyterHub (child process) with the capacity API, page and metrics installed."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest_asyncio

from jupyter_gpuburst.bench.hubproc import HubProcess

HELPERS = Path(__file__).resolve().parents[1] / "helpers"

STATIC_HUB_CONFIG = f"""
import sys
sys.path.insert(0, {str(HELPERS)!r})
from fakes import StaticTracker
from jupyter_gpuburst.hub import install, metrics

tracker = StaticTracker()
install(c, tracker_source=lambda: tracker)
metrics.add_capacity_source(tracker.snapshot)
# as GPU kernels need: the service may be reached, but the capacity is still the admins'
c.JupyterHub.load_roles.append({{"name": "gpu-kernels", "users": ["kernelstudent"], "scopes": ["access:services!service=gpuburst"]}})
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def static_hub(tmp_path_factory):
    """A hub whose capacity comes from ``fakes.StaticTracker``; admin service token on ``.token``."""
    hub = HubProcess(tmp_path_factory.mktemp("hub"), STATIC_HUB_CONFIG, env={"GPUBURST_TEST_SECRET": "tok-do-not-leak"})
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def http():
    async with aiohttp.ClientSession() as session:
        yield session
