"""Fixtures for the local federation's tests (API emulator fixtures first)."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store


@pytest.fixture
async def apiserver():
    """A fresh emulated API server on a free port; stopped (watches closed) afterwards."""
    server = ApiServer(Store())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def apiserver_kubeconfig(apiserver, tmp_path):
    """A kubeconfig with one context, ``sim``, pointing at ``apiserver``."""
    return write_kubeconfig(tmp_path / "kubeconfig", {"sim": apiserver.url}, "sim")
