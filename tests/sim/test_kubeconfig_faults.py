"""Kubeconfig writer (read back by the official client) and fault settings."""

from __future__ import annotations

import stat

import kubernetes
import pytest

from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig


def test_kubeconfig_loads_in_official_client(tmp_path):
    path = write_kubeconfig(tmp_path / "kc" / "config", {"origin": "http://127.0.0.1:1234", "donor-1": "http://127.0.0.1:5678"}, "origin")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    contexts, current = kubernetes.config.list_kube_config_contexts(str(path))
    assert current["name"] == "origin" and {c["name"] for c in contexts} == {"origin", "donor-1"}
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(path), context="donor-1", client_configuration=config)
    assert config.host == "http://127.0.0.1:5678"


def test_kubeconfig_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="current context 'x'"):
        write_kubeconfig(tmp_path / "c", {"origin": "http://127.0.0.1:1"}, "x")
    with pytest.raises(ValueError, match="not an http"):
        write_kubeconfig(tmp_path / "c", {"origin": "127.0.0.1:1"}, "origin")


def test_faults_validate_and_are_reproducible():
    with pytest.raises(ValueError, match="error_rate_429"):
        Faults(error_rate_429=0.8, error_rate_500=0.5)
    with pytest.raises(ValueError, match="drop_watch_after"):
        Faults(drop_watch_after=0)
    first, second = Faults(error_rate_429=0.3, error_rate_500=0.3, seed=7), Faults(error_rate_429=0.3, error_rate_500=0.3, seed=7)
    picks = [first.pick_error() for _ in range(50)]
    assert picks == [second.pick_error() for _ in range(50)]
    assert {429, 500, None} == set(picks)
    assert Faults().pick_error() is None
