"""The kube tier's pieces (tests/kube, `make test-kube`): a federation on the real control plane
whose origin audit log joins the tier's collection, and a hub acting as its ServiceAccount, bound
only by the deployment's RBAC. ``GPUBURST_CONTROL_PLANE=kube`` makes the shared ``federation``
and ``start_hub`` fixtures (helpers/fixtures.py) these, so the emulator tiers' own test files run
unchanged on the real control plane."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.doctor.connect import USER_AGENT_PRODUCT
from jupyter_gpuburst.sim.config import load_config
from jupyter_gpuburst.sim.kube import audit, binaries, deployment
from jupyter_gpuburst.sim.kube.deployment import ADMIN_MANIFESTS, HUB_NAMESPACE, HUB_RBAC, HUB_USER, OUR_RBAC

__all__ = ["ADMIN_MANIFESTS", "HUB_NAMESPACE", "HUB_RBAC", "HUB_USER", "NAMESPACES", "OUR_RBAC"]

CONTROL_PLANE_ENV = "GPUBURST_CONTROL_PLANE"
AUDIT_DIR_ENV = "GPUBURST_KUBE_AUDIT_DIR"
NOT_BUILT = "kube tier: the real control plane is not built here (`make kube` builds it; it needs Go >= 1.25)"
# the tier's users' namespace is the one the tests' pods are in
USERS_NAMESPACE = "default"
# the hub's requests are its ServiceAccount's but those of `gpuburst doctor` run with its token
NOT_THE_HUB = f"{USER_AGENT_PRODUCT}/"
# the default federation's donors, each with its kernel namespace (hub_config/donor-kernels.yaml)
DONORS = tuple(donor.cluster.id for donor in load_config().donors)
NAMESPACES = deployment.namespaces(USERS_NAMESPACE, DONORS)
# servers share the users' namespace with kernels: restricted is reported (warn, audit), not enforced
USERS_POD_SECURITY = podsecurity.namespace_labels(warn=podsecurity.RESTRICTED, audit=podsecurity.RESTRICTED)

# Refused on purpose, each with why the hub asks anyway.
EXPECTED_REFUSALS: dict[audit.Use, str] = {
    audit.Use("create", "", "namespaces", namespaced=False): (
        "GPU kernels on a donor: the hub makes the donor's kernel namespace where it may; install has "
        "the admin apply hub_config/donor-kernels.yaml instead, and the hub uses that one (hub/kernels/donorspace.py)"
    ),
    audit.Use("create", "scheduling.k8s.io", "priorityclasses", namespaced=False): (
        "warm pools: the hub creates its PriorityClass where it may; install has the admin apply "
        "hub_config/warm-pools.yaml instead, and the hub says so once (hub/pools/controller.py)"
    ),
}


def on_kube() -> bool:
    return os.environ.get(CONTROL_PLANE_ENV) == "kube"


def audit_collection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where the tier gathers its origins' audit logs, a file per federation: the one
    ``GPUBURST_KUBE_AUDIT_DIR`` names, which the tier's parallel run and the run of the files that
    read it afterwards share (make test-kube); else one in this run's temporary folder, for a
    single run in which those files come last."""
    shared = os.environ.get(AUDIT_DIR_ENV)
    folder = Path(shared) if shared else tmp_path_factory.getbasetemp() / "origin-audit"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def collected_audit(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every audit log the tier has gathered; a test that reads them fails when there is none."""
    logs = sorted(audit_collection(tmp_path_factory).glob("*.jsonl"))
    if not logs:
        pytest.fail("no audit events were collected: run the whole kube tier (make test-kube), whose other files make them")
    return logs


@contextlib.asynccontextmanager
async def kube_federation(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, pool: Any = None, request: pytest.FixtureRequest | None = None
) -> AsyncIterator:
    """The default federation, each site on its own real control plane, with an admin kubeconfig
    at ``.kubeconfig`` (and ``.kubeconfig_path``); its origin's audit log is collected on the way
    out. Where all of a worker's tests share one event loop (the kube tier), a federation is kept
    from one test to the next, put back as it started (helpers/kubepool.py)."""
    from jupyter_gpuburst.sim.testing import running_federation

    if not binaries.available():
        pytest.skip(NOT_BUILT)
    if pool is not None and request is not None:
        fed = await pool.take(install)
        failed_before = request.session.testsfailed
        try:
            yield fed
        finally:
            await pool.give_back(fed, failed=request.session.testsfailed > failed_before)
        return
    kubeconfig = tmp_path / "federation.kubeconfig"
    async with running_federation(state_dir=tmp_path / "pods", kubeconfig=kubeconfig, control_plane="kube") as fed:
        fed.kubeconfig = fed.kubeconfig_path = kubeconfig
        try:
            yield fed
        finally:
            audit = fed.origin.control_plane.audit_log
            if audit.exists():
                shutil.copyfile(audit, audit_collection(tmp_path_factory) / f"{uuid.uuid4().hex}.jsonl")


def shares_one_loop(config: pytest.Config) -> bool:
    """Whether every test and fixture of a worker runs in one event loop (pytest-asyncio's
    session loop scope), which a federation kept between tests needs."""
    return config.getini("asyncio_default_test_loop_scope") == "session" == config.getini("asyncio_default_fixture_loop_scope")


def install(federation) -> None:
    """What docs/install.md asks of an admin, on a kept federation before its first test (each
    test's ``hub_kubeconfig`` applies it again, which changes nothing)."""
    hub_kubeconfig(federation, federation.kubeconfig_path.parent)


if on_kube():

    @pytest_asyncio.fixture(scope="session", loop_scope="session")
    async def kube_federation_pool(request, tmp_path_factory):
        """The worker's kept federation (helpers/kubepool.py), stopped when its tests are done;
        None where its tests do not share one event loop."""
        from helpers.kubepool import FederationPool

        if not shares_one_loop(request.config):
            yield None
            return
        pool = FederationPool(tmp_path_factory.mktemp("kube-federations"), audit_collection(tmp_path_factory))
        yield pool
        await pool.close()

else:

    @pytest.fixture(scope="session")
    def kube_federation_pool():
        """On the emulator, nothing is kept: each test's federation is its own."""
        return None


def hub_kubeconfig(federation, tmp_path: Path) -> Path:
    """Install as the docs ask an admin to (deployment.py: the warm pools' PriorityClass, the
    hub's RBAC), with the users' namespace reporting restricted Pod Security, and a kubeconfig
    acting as the hub's ServiceAccount ``jhub/hub``."""
    from jupyter_gpuburst.sim.kube.hubaccount import label_namespace

    label_namespace(federation.origin, USERS_NAMESPACE, USERS_POD_SECURITY)
    return deployment.hub_kubeconfig(federation.origin, tmp_path, users=USERS_NAMESPACE, donors=DONORS)


@contextlib.asynccontextmanager
async def admin_clients(kubeconfig: Path) -> AsyncIterator[tuple[Any, Any]]:
    """kubernetes_asyncio's REST client and its WebSocket client (for pods/exec), acting as
    ``kubeconfig``'s user; both closed afterwards."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api = client.ApiClient(configuration)
    ws = WsApiClient(configuration=configuration)
    try:
        yield api, ws
    finally:
        await ws.close()
        await api.close()
