"""A real JupyterHub (child process) with the capacity API, page and metrics installed."""

from __future__ import annotations

import aiohttp
import pytest
import pytest_asyncio
from helpers.static_hub import STATIC_HUB_CONFIG
from sqlalchemy import event
from sqlalchemy.engine import Engine

from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.hub import database


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


@pytest.fixture
def sqlite_wal_undone():
    """``database.sqlite_wal()`` registers its listener for the whole process: a test that calls
    it takes it away after, so the worker's other tests open their databases as before."""
    yield
    if event.contains(Engine, "connect", database._on_connect):
        event.remove(Engine, "connect", database._on_connect)
