"""Shared test configuration: where the reference material lives, and opt-in tiers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUBURST_SHARED", REPO.parent / "shared"))
LIQO_CRDS = SHARED / "reference" / "liqo-crds"


@pytest.fixture(scope="session")
def liqo_crd_dir() -> Path:
    if not LIQO_CRDS.is_dir():
        pytest.fail(f"Liqo CRDs not found at {LIQO_CRDS}; set GPUBURST_SHARED to the shared/ folder")
    return LIQO_CRDS


def pytest_collection_modifyitems(config, items):
    # Playwright's sync API keeps an event loop running in the main thread once it starts, and
    # pytest-asyncio cannot run a test while one is running: browser tests go last.
    items.sort(key=lambda item: "browser" in item.keywords)
    skip_real = pytest.mark.skip(reason="set GPUBURST_KUBECONFIG to run real-cluster tests")
    for item in items:
        # the marker, not item.keywords: keywords also hold directory names (tests/realcluster/)
        if item.get_closest_marker("realcluster") and not os.environ.get("GPUBURST_KUBECONFIG"):
            item.add_marker(skip_real)
