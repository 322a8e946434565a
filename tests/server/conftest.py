"""pytest-jupyter's server fixtures, for this folder only, on pytest-asyncio's event loop.

pytest-jupyter's plugin cannot be listed in a non-root conftest, and its collection hooks
would take over every coroutine test in the suite. So its fixtures are imported here, its
hooks are left out, and `jp_asyncio_loop` is the loop pytest-asyncio runs each test on, so
the server and the test share one loop.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from pytest_jupyter.jupyter_server import *  # noqa: F403
from serverext_env import GPUBURST_ENV, SECRET

# Keep pytest-jupyter's fixtures, not its hooks (pytest-asyncio runs the coroutine tests).
del pytest_pycollect_makeitem, pytest_pyfunc_call  # noqa: F821


@pytest_asyncio.fixture
async def jp_asyncio_loop():
    return asyncio.get_running_loop()


@pytest.fixture
def gpuburst_env() -> dict[str, str]:
    """Env the spawner would set; override with `@pytest.mark.parametrize("gpuburst_env", ...)`."""
    return {}


@pytest.fixture
def gpuburst_config() -> dict:
    """GPUBurstServerExtension config; override like gpuburst_env. The servers here run inside
    the test process, whose heap is not theirs to freeze."""
    return {
        "backend": "simulated",
        "sim_gpus": 2,
        "sampling_period_s": 0.1,
        "process_sampling_period_s": 0.2,
        "freeze_heap_at_start": False,
    }


@pytest.fixture
def server_extra_config() -> dict:
    """Extra ServerApp config (e.g. an authorizer)."""
    return {}


@pytest.fixture
def jp_server_config(gpuburst_env, gpuburst_config, server_extra_config, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", SECRET)
    for key in GPUBURST_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in gpuburst_env.items():
        monkeypatch.setenv(key, value)
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpuburst": True}, **server_extra_config},
        "GPUBurstServerExtension": gpuburst_config,
    }
