"""A real JupyterHub (child process) with the capacity API, page and metrics installed."""

from __future__ import annotations

import aiohttp
import pytest_asyncio
from helpers.static_hub import STATIC_HUB_CONFIG

from jupyter_gpuburst.bench.hubproc import HubProcess


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
