"""Fixtures of the spawner's tests."""

from __future__ import annotations

import pytest
from helpers.spawner import FakeCoreApi


@pytest.fixture
def no_cluster(monkeypatch):
    """KubeSpawner without a cluster: no kubeconfig is loaded, and its client only serializes."""
    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kwargs: None)
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *a, **k: FakeCoreApi())
