"""Test configuration for every folder: the vendored reference data, shared fixtures, and the
tiers (markers: integration, browser, realcluster, gpu) some tests opt into."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuburst.sim.hostgpus import GPUS_MODE_ENV

# pytest caches a test module with its asserts rewritten in __pycache__, unless bytecode may not
# be written (PYTHONDONTWRITEBYTECODE, which CI machines often set): then every pytest process
# rewrote all 250 test modules again as it collected them, 7 of its 12 CPU seconds, and `make
# test` runs ten such processes. Here, for pytest's own process only (a hub or server started
# by a test keeps the environment's choice), the cache is written and read as pytest intends.
sys.dont_write_bytecode = False

# Fixtures several folders use: the local federation and a hub in front of it, the stand-in hub
# of GPU kernels, chromium for browser tests, the real-cluster tier (tests/REALCLUSTER.md)
pytest_plugins = [
    "helpers.fixtures",
    "helpers.fake_hub",
    "helpers.browser",
    "helpers.realcluster",
    "helpers.failure_logs",
    "helpers.browser_trouble",  # after failure_logs, whose redaction it imports
    "helpers.progress",
    "helpers.sigterm",
]

REPO = Path(__file__).resolve().parent.parent
# Upstream reference data, vendored with its provenance and license (tests/reference/README.md);
# KubeSpawner's suite in it runs in an environment of its own (tools/kubespawner-suite.sh)
collect_ignore = ["reference"]
REFERENCE = REPO / "tests" / "reference"
LIQO_CRDS = REFERENCE / "liqo-crds"
Z2JH = REFERENCE / "z2jh"


@pytest.fixture(scope="session")
def liqo_crd_dir() -> Path:
    return LIQO_CRDS


@pytest.fixture(scope="session")
def z2jh_dir() -> Path:
    return Z2JH


@pytest.fixture(scope="session")
def built_dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), built once per run as an admin would (`python -m build`: the sdist, then
    the wheel from it), with npm and node failing if anything calls them: once the lab extension
    is built (`make setup`), packaging needs no Node. Under xdist the first worker to ask builds
    (a build takes a minute or more) and the others wait for it and share its result. The build
    has a guard of its own (280 s): the tests that ask for it time their own function only
    (``timeout(..., func_only=True)``), since whichever asks first pays for the build, which
    took 162 s in a fresh clone's suite; beside twelve busy loops, build and install ran past 300 s."""
    if not (REPO / "jupyter_gpuburst" / "labextension" / "static" / "style.js").exists():
        pytest.skip("the lab extension is not built (make setup builds it)")
    # every worker's basetemp sits in this run's own folder; without xdist it is our own
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "dist-built-once"
    with open(shared / "dist-built-once.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        failed = shared / "dist-built-once.failed"
        if failed.exists():
            pytest.fail(failed.read_text())
        if not out.exists():
            _build_dists(tmp_path_factory, out, failed)
    (sdist,) = out.glob("jupyter_gpuburst-*.tar.gz")
    (wheel,) = out.glob("jupyter_gpuburst-*.whl")
    return sdist, wheel


def _build_dists(tmp_path_factory: pytest.TempPathFactory, out: Path, failed: Path) -> None:
    no_node = tmp_path_factory.mktemp("no-node")
    for tool in ("npm", "node", "jlpm", "yarn"):
        (no_node / tool).write_text(f"#!/bin/sh\necho '{tool} must not run: the lab extension is prebuilt' >&2\nexit 97\n")
        (no_node / tool).chmod(0o755)
    building = out.with_name(out.name + ".partial")
    env = {**os.environ, "PATH": f"{no_node}:{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(building), str(REPO)],
        env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    if done.returncode != 0:
        # the workers that wait for this build fail with the same message, not a build of their own
        failed.write_text(f"build without Node failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        pytest.fail(failed.read_text())
    building.rename(out)


@pytest.fixture(scope="session")
def built_wheel(built_dists: tuple[Path, Path]) -> Path:
    return built_dists[1]


def pytest_collection_modifyitems(config, items):
    # Playwright's sync API keeps an event loop running in the main thread once it starts, and
    # pytest-asyncio cannot run a test while one is running: browser tests go last. Integration
    # tests (minutes a file: hubs, servers, builds) go first, so that xdist hands out the long
    # files first and the quick ones fill in at the end, instead of a long file ending alone.
    # xdist keeps this order only with --no-loadscope-reorder (the Makefile's tiers): by default
    # --dist loadfile hands out the files with the most tests first, and a one-test walk of
    # three minutes started last and ran alone for two.
    items.sort(key=lambda item: ("browser" in item.keywords, item.get_closest_marker("integration") is None))
    skip_real = pytest.mark.skip(reason="set GPUBURST_KUBECONFIG to run real-cluster tests")
    for item in items:
        # the marker, not item.keywords: keywords also hold directory and file names
        if item.get_closest_marker("realcluster") and not os.environ.get("GPUBURST_KUBECONFIG"):
            item.add_marker(skip_real)


@pytest.fixture(autouse=True)
def _no_visible_devices_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVML fakes stand for every GPU a test names: the NVIDIA_VISIBLE_DEVICES of the machine
    running the tests (a CUDA container sets one) must not hide them from the NVML backend. And
    a demo or sim a test starts keeps the GPUs it expects: on a machine with NVIDIA GPUs
    `--gpus auto` would put them on the origin; the `gpu` tier asks for `--gpus real` itself."""
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(GPUS_MODE_ENV, "simulated")


@pytest.fixture(autouse=True)
def _no_jupyterhub_singleton_outlives_its_test():
    """Code of the hub's that asks for ``JupyterHub.instance()`` makes the process's one
    Application singleton when a test runs it without a hub; a later test in the same worker that
    starts a jupyter_server ``ServerApp`` then fails with MultipleInstanceError. Each test gets a
    process with no hub singleton, as it found it."""
    from jupyterhub.app import JupyterHub

    had = JupyterHub.initialized()
    yield
    if not had and JupyterHub.initialized():
        JupyterHub.clear_instance()
