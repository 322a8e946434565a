"""`gpuburst demo --config FILE`: an admin's own hub config, loaded after the demo's as
``jupyterhub -f`` would; a file that cannot be loaded stops the demo before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from jupyter_gpuburst import demo, demo_cli
from jupyter_gpuburst.hub.ports import free_port


def demo_env(monkeypatch: pytest.MonkeyPatch, state: Path, user_config: Path | None) -> None:
    """The environment `gpuburst demo` gives its hub (Demo._start_hub)."""
    for name, value in {
        "GPUBURST_DEMO_STATE_DIR": str(state),
        "GPUBURST_DEMO_PORT": "1",
        "GPUBURST_DEMO_HUB_PORT": "2",
        "GPUBURST_DEMO_PROXY_API_PORT": "3",
        "GPUBURST_DEMO_PASSWORD": "x" * 8,
        "GPUBURST_DEMO_ADMIN_PASSWORD": "a" * 32,
        "GPUBURST_DEMO_GPU_PRODUCTS": json.dumps(demo.gpu_products(demo.federation_config(demo.DemoOptions()))),
        "GPUBURST_DEMO_REAL_GPUS": "{}",
        "GPUBURST_DEMO_NODE_GPUS": "8",
        "GPUBURST_DEMO_USER_CONFIG": str(user_config or ""),
    }.items():
        monkeypatch.setenv(name, value)


def load_as_jupyterhub(path: Path):
    """What ``jupyterhub -f path`` reads: traitlets' own loader, its load_subconfig included."""
    return PyFileConfigLoader(path.name, str(path.parent)).load_config()


def test_the_admins_config_is_loaded_after_the_demos_own(monkeypatch, tmp_path):
    mine = tmp_path / "my_config.py"
    mine.write_text(
        "c.GPUKernelSettings.queue_when_full = False\nc.GPUCullingSettings.timeout_seconds = 420.0\nc.KubeSpawner.start_timeout = 33\n"
    )
    demo_env(monkeypatch, tmp_path, None)
    own = load_as_jupyterhub(demo.DEMO_CONFIG)
    assert own.GPUKernelSettings.queue_when_full is True
    demo_env(monkeypatch, tmp_path, mine)
    config = load_as_jupyterhub(demo.DEMO_CONFIG)
    assert config.GPUKernelSettings.queue_when_full is False
    assert config.GPUCullingSettings.timeout_seconds == 420.0
    assert own.KubeSpawner.start_timeout != 33 and config.KubeSpawner.start_timeout == 33
    # the rest of the demo's own stays
    assert config.JupyterHub.spawner_class == "gpuburst"


def test_the_demos_gpu_kernels_let_one_user_fill_a_site_and_queue(monkeypatch, tmp_path):
    demo_env(monkeypatch, tmp_path, None)
    config = load_as_jupyterhub(demo.DEMO_CONFIG)
    kernels = config.GPUKernelSettings
    assert kernels.queue_when_full is True
    counts = sorted((k.get("resource", "nvidia.com/gpu"), k["count"]) for k in kernels.profiles)
    assert counts == [("nvidia.com/gpu", 1), ("nvidia.com/gpu", 2), ("nvidia.com/gpu", 8), ("nvidia.com/mig-1g.10gb", 1)]
    # every site's whole GPUs taken by one user (8 donors and the origin at most), and one more waiting
    assert kernels.max_kernels_per_user >= 8 + 1 + 1
    assert demo.largest_node_gpus(demo.DemoOptions(), 1) == 8
    assert demo.largest_node_gpus(demo.DemoOptions(origin_gpus=16), 1) == 16
    assert demo.largest_node_gpus(demo.DemoOptions(), 0) == 2


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),
        ("c.JupyterHub.port = (\n", "not valid Python, line 1: '(' was never closed"),
        ("", None),
    ],
)
def test_a_config_that_cannot_be_loaded_stops_the_demo_before_anything_starts(capsys, tmp_path, content, said) -> None:
    path = tmp_path / "my_config.py"
    if content is not None:
        path.write_text(content)
    assert demo_cli.config_problem(path) == (f"--config {path}: {said}" if said else None)
    if said is None:
        return
    state = tmp_path / "state"
    assert demo_cli.main(["--config", str(path), "--port", str(free_port()), "--state-dir", str(state)]) == 2
    err = capsys.readouterr().err
    assert err == f"gpuburst demo: --config {path}: {said}\n"
    assert not state.exists()


def test_a_directory_is_no_config(tmp_path) -> None:
    assert demo_cli.config_problem(tmp_path) == f"--config {tmp_path}: a directory, not a JupyterHub config file"
