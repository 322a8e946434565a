"""The kube tier's pieces (tests/kube, `make test-kube`): a federation on the real control plane
whose origin audit log joins the tier's collection, and a hub acting as its ServiceAccount, bound
only by the deployment's RBAC. ``GPUBURST_CONTROL_PLANE=kube`` makes the shared ``federation``
and ``start_hub`` fixtures (helpers/fixtures.py) these, so the emulator tiers' own test files run
unchanged on the real control plane."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.sim.kube import binaries

CONTROL_PLANE_ENV = "GPUBURST_CONTROL_PLANE"
NOT_BUILT = "kube tier: the real control plane is not built here (`make kube` builds it; it needs Go >= 1.25)"
REPO = Path(__file__).resolve().parents[2]
# The hub's whole grant: z2jh's own hub Role (vendored) and what hub_config/ adds to it
Z2JH_HUB_ROLE = REPO / "tests" / "reference" / "z2jh" / "hub-role.yaml"
OUR_RBAC = (REPO / "hub_config" / "rbac.yaml", REPO / "hub_config" / "rbac-kernels.yaml")
HUB_RBAC = (Z2JH_HUB_ROLE, *OUR_RBAC)
# what install asks an admin to apply besides the hub's RBAC (docs/install.md)
ADMIN_MANIFESTS = (REPO / "hub_config" / "warm-pools.yaml",)
# the manifests' namespaces -> the tier's: the hub's own apart from the users' (the tests' pods are in default)
HUB_NAMESPACE = "jhub"
NAMESPACES = {"jhub": HUB_NAMESPACE, "jhub-users": "default"}
HUB_USER = f"system:serviceaccount:{HUB_NAMESPACE}:hub"
# servers share the users' namespace with kernels: restricted is reported (warn, audit), not enforced
USERS_POD_SECURITY = podsecurity.namespace_labels(warn=podsecurity.RESTRICTED, audit=podsecurity.RESTRICTED)


def on_kube() -> bool:
    return os.environ.get(CONTROL_PLANE_ENV) == "kube"


def audit_collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tier gathers the origin's audit events (the tier runs in one process)."""
    return tmp_path_factory.getbasetemp() / "origin-audit.jsonl"


@contextlib.asynccontextmanager
async def kube_federation(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator:
    """The default federation, each site on its own real control plane, with an admin kubeconfig
    at ``.kubeconfig`` (and ``.kubeconfig_path``); its origin's audit log is collected on the way out."""
    from jupyter_gpuburst.sim.testing import running_federation

    if not binaries.available():
        pytest.skip(NOT_BUILT)
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


def hub_kubeconfig(federation, tmp_path: Path) -> Path:
    """Install as the docs ask an admin to (the warm pools' PriorityClass, the hub's RBAC), and a
    kubeconfig acting as the hub's ServiceAccount ``jhub/hub``."""
    from jupyter_gpuburst.sim.kube.hubaccount import apply_as_admin, grant_hub, label_namespace

    apply_as_admin(federation.origin, ADMIN_MANIFESTS, NAMESPACES)
    label_namespace(federation.origin, NAMESPACES["jhub-users"], USERS_POD_SECURITY)
    return grant_hub(federation.origin, HUB_RBAC, tmp_path, NAMESPACES, hub_namespace=HUB_NAMESPACE)
