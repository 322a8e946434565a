"""The ledger's "held idle" comes from the culler's GPU idle signal wherever culling is
configured, and is unknown (never a guessed 0) elsewhere."""

from __future__ import annotations

import time

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub import install
from jupyter_gpuburst.hub.accounting import wiring
from jupyter_gpuburst.hub.culling import live
from jupyter_gpuburst.hub.culling.culler import Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.installer import wire_idle_source


@pytest.fixture(autouse=True)
def no_culler_nor_source(monkeypatch):
    monkeypatch.setattr(live, "_culler", None)
    monkeypatch.setattr(wiring, "_idle_source", None)


def hub_config(culling: bool) -> Config:
    c = Config()
    c.JupyterHub.hub_connect_url = "http://hub.jhub.svc.cluster.local:8081"
    if culling:
        c.GPUCullingSettings.enabled = False  # configured (servers report), not culling yet
    return c


def test_the_hub_wires_the_culling_signal_at_start_only_where_servers_report_it():
    # install(c) leaves it to the hub's start, when the whole config has been read
    for culling in (False, True):
        c = hub_config(culling)
        install(c)
        assert wiring._idle_source is None
        wire_idle_source(c)
        assert wiring._idle_source is (live.idle_since if culling else None)


async def stop(user: str, server_name: str) -> str:
    return "stopped"


def report(culler: Culler, idle_s: float | None, seq: int, now: float) -> None:
    body = {"server_name": "", "boot": "b1", "seq": seq, "gpu_idle_s": idle_s}
    culler.store.report("ann", body, lambda record_id, server_name: None, now=now)


def test_idle_since_is_the_signal_and_silence_or_no_gpu_is_unknown(monkeypatch):
    settings = GPUCullingSettings()
    culler = Culler(settings, hub=None, stop_server=stop)
    monkeypatch.setattr(live, "_culler", culler)
    now = time.time()
    assert live.idle_since("ann", "", "server") is None  # never heard of

    report(culler, 600.0, seq=1, now=now)
    assert live.idle_since("ann", "", "server") == pytest.approx(now - 600.0)

    report(culler, None, seq=2, now=now)  # nothing readable: not idle
    assert live.idle_since("ann", "", "server") is None

    stale = now - 4 * settings.period_seconds
    report(culler, 600.0, seq=3, now=stale)  # heard from too long ago: unknown
    assert live.idle_since("ann", "", "server") is None
