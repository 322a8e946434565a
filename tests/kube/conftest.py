"""The kube tier: the same paths on the real control plane (kube-apiserver, kube-scheduler,
kube-controller-manager, etcd, built by `make kube`), where RBAC, admission, validation and the
controllers are Kubernetes' own. Skipped, with the reason, where the control plane is not built."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpuburst.sim.kube import binaries

NOT_BUILT = "kube tier: the real control plane is not built here (`make kube` builds it; it needs Go >= 1.25)"


def pytest_collection_modifyitems(config, items):
    if binaries.available():
        return
    for item in items:
        if item.get_closest_marker("kube"):
            item.add_marker(pytest.mark.skip(reason=NOT_BUILT))


def audit_collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tier gathers the origin's audit events (this worker's; the tier runs on one)."""
    return tmp_path_factory.getbasetemp() / "origin-audit.jsonl"


@pytest.fixture
async def federation(tmp_path, tmp_path_factory):
    """The default federation with each site on its own real control plane; a kubeconfig with the
    federation's admin credentials, contexts ``origin`` and ``donor-1``, is at ``federation.kubeconfig``.
    The origin's audit log joins the tier's collection (``test_zz_hub_rbac`` judges it)."""
    from jupyter_gpuburst.sim.testing import running_federation

    kubeconfig = tmp_path / "federation.kubeconfig"
    async with running_federation(state_dir=tmp_path / "pods", kubeconfig=kubeconfig, control_plane="kube") as fed:
        fed.kubeconfig = fed.kubeconfig_path = kubeconfig
        try:
            yield fed
        finally:
            audit = fed.origin.control_plane.audit_log
            if audit.exists():
                with open(audit_collection(tmp_path_factory), "a") as out:
                    out.write(audit.read_text())


REPO = Path(__file__).resolve().parents[2]
# The hub's whole grant: z2jh's own hub Role (vendored) and what hub_config/ adds to it
HUB_RBAC = (
    REPO / "tests" / "reference" / "z2jh" / "hub-role.yaml",
    REPO / "hub_config" / "rbac.yaml",
    REPO / "hub_config" / "rbac-kernels.yaml",
)


@pytest.fixture
async def start_hub(federation, tmp_path):
    """Factory: a hub (extra config lines) acting as its ServiceAccount ``default/hub``, which
    only the deployment's RBAC binds; every hub is stopped afterwards."""
    from helpers.hub import Hub

    from jupyter_gpuburst.sim.kube.hubaccount import grant_hub

    kubeconfig = grant_hub(federation.origin, "default", HUB_RBAC, tmp_path)
    hubs: list[Hub] = []

    async def start(extra_config: str = "") -> Hub:
        workdir = tmp_path / f"hub{len(hubs)}"
        workdir.mkdir()
        hub = Hub(workdir, kubeconfig, extra_config)
        hubs.append(hub)
        hub.start()
        await hub.wait_up(timeout=120)
        return hub

    yield start
    for hub in hubs:
        await hub.stop()
