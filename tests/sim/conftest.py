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


@pytest.fixture
async def federation(tmp_path):
    """The default federation (origin + donor-1 peered), started in-process; a kubeconfig with
    contexts ``origin`` and ``donor-1`` is at ``federation.kubeconfig``."""
    from jupyter_gpuburst.sim.testing import running_federation

    kubeconfig = tmp_path / "federation.kubeconfig"
    async with running_federation(state_dir=tmp_path / "pods", kubeconfig=kubeconfig) as fed:
        fed.kubeconfig = kubeconfig
        yield fed
