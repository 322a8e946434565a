"""The extension's configuration and how jupyter_server finds it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from traitlets import TraitError

import jupyter_gpuburst
from jupyter_gpuburst.core import heap
from jupyter_gpuburst.server import GPUBurstServerExtension
from jupyter_gpuburst.server import app as app_module

REPO = Path(__file__).resolve().parents[2]


def test_extension_point_names_the_app():
    (point,) = jupyter_gpuburst._jupyter_server_extension_points()
    assert point["app"] is GPUBurstServerExtension and point["module"] == "jupyter_gpuburst.server"


def test_auto_enable_file_enables_the_extension():
    config = json.loads((REPO / "jupyter-config" / "server-config" / "jupyter_gpuburst.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"] == {GPUBurstServerExtension.name: True}
    assert GPUBurstServerExtension.name == "jupyter_gpuburst"


def test_defaults(monkeypatch):
    for key in ("JUPYTER_GPUBURST_BACKEND", "JUPYTER_GPUBURST_SIM_GPUS", "JUPYTER_GPUBURST_SIM_MODEL"):
        monkeypatch.delenv(key, raising=False)
    app = GPUBurstServerExtension()
    assert (app.backend, app.sampling_period_s, app.process_sampling_period_s, app.history_length) == (
        "auto",
        1.0,
        5.0,
        300,
    )
    assert (app.sim_gpus, app.sim_model) == (1, "NVIDIA A100-SXM4-40GB")


def test_env_selects_simulated_backend(monkeypatch):
    monkeypatch.setenv("JUPYTER_GPUBURST_BACKEND", "simulated")
    monkeypatch.setenv("JUPYTER_GPUBURST_SIM_GPUS", "4")
    monkeypatch.setenv("JUPYTER_GPUBURST_SIM_MODEL", "NVIDIA L4")
    app = GPUBurstServerExtension()
    assert (app.backend, app.sim_gpus, app.sim_model) == ("simulated", 4, "NVIDIA L4")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sampling_period_s": 0}, "sampling_period_s must be positive"),
        ({"history_length": 0}, "history_length must be at least 1"),
        ({"sim_gpus": 99}, "sim_gpus must be 1-16"),
        ({"sim_model": "GTX 480"}, "sim_model 'GTX 480' unknown"),
        ({"backend": "cuda"}, "backend"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(TraitError, match=message):
        GPUBurstServerExtension(**kwargs)


def test_bad_backend_env_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("JUPYTER_GPUBURST_BACKEND", "cuda")
    with pytest.raises(TraitError, match="JUPYTER_GPUBURST_BACKEND='cuda'"):
        GPUBurstServerExtension().backend  # noqa: B018


def test_freeze_heap_collects_and_freezes_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "_frozen", False)
    monkeypatch.setattr(heap.gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr(heap.gc, "freeze", lambda: calls.append("freeze"))
    assert heap.freeze_once() is True
    assert heap.freeze_once() is False
    assert calls == ["collect", "freeze"]


@pytest.fixture
def freeze_calls(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(app_module.heap, "freeze_once", lambda: calls.append("freeze"))
    return calls


@pytest.mark.parametrize(
    ("gpuburst_config", "expected"),
    [({"backend": "simulated", "freeze_heap_at_start": True}, ["freeze"]), ({"backend": "simulated", "freeze_heap_at_start": False}, [])],
)
async def test_server_freezes_its_heap_once_its_loop_runs(freeze_calls, jp_fetch, expected):
    response = await jp_fetch("api", "gpuburst", "placement")
    assert response.code == 200
    await asyncio.sleep(0)
    assert freeze_calls == expected
