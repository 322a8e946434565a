"""Test configuration for every tier: the vendored reference data, and opt-in tiers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Upstream reference data, vendored with its provenance and license (tests/reference/README.md)
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
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per session as an admin would (`python -m build --wheel`)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
        capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, f"wheel build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (wheel,) = out.glob("jupyter_gpuburst-*.whl")
    return wheel


def pytest_collection_modifyitems(config, items):
    # Playwright's sync API keeps an event loop running in the main thread once it starts, and
    # pytest-asyncio cannot run a test while one is running: browser tests go last.
    items.sort(key=lambda item: "browser" in item.keywords)
    skip_real = pytest.mark.skip(reason="set GPUBURST_KUBECONFIG to run real-cluster tests")
    for item in items:
        # the marker, not item.keywords: keywords also hold directory names (tests/realcluster/)
        if item.get_closest_marker("realcluster") and not os.environ.get("GPUBURST_KUBECONFIG"):
            item.add_marker(skip_real)
