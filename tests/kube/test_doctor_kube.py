"""`gpuburst doctor` on the real control plane, installed as docs/install.md says: the real RBAC
authorizer answers its access reviews, the real API server serves its discovery and Liqo's CRDs.
The admin's run (`--as` the hub's ServiceAccount, as the install docs have it) passes, and so
does the hub's own identity; with one of the install's grants missing, doctor fails naming the
manifest that holds it."""

from __future__ import annotations

import asyncio
import json
from contextlib import redirect_stdout
from io import StringIO

import pytest
from helpers.kubetier import HUB_NAMESPACE, HUB_USER, USERS_NAMESPACE, hub_kubeconfig

from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo

pytestmark = pytest.mark.kube


async def doctor_json(*argv: str) -> tuple[int, dict]:
    out = StringIO()

    def run() -> int:
        with redirect_stdout(out):
            return doctor.main(["--json", *argv])

    rc = await asyncio.to_thread(run)
    return rc, json.loads(out.getvalue())


def node_states(federation) -> list[tuple]:
    """Each origin node's Ready condition and taints: what decides whether doctor counts it."""
    nodes, _ = federation.origin.store.list("nodes")
    return [
        (
            n["metadata"]["name"],
            [(c["status"], c.get("reason")) for c in n["status"].get("conditions") or [] if c["type"] == "Ready"],
            n["spec"].get("taints"),
        )
        for n in nodes
    ]


def not_ok(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["status"] != "ok"]


@pytest.fixture
async def installed(federation, tmp_path):
    """The federation with the hub installed on its origin, the users' namespace offloaded (as
    `liqoctl offload namespace` leaves it); (admin kubeconfig, the hub's kubeconfig)."""
    hub = hub_kubeconfig(federation, tmp_path)
    federation.origin.store.create(
        f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", liqo.namespace_offloading(USERS_NAMESPACE), USERS_NAMESPACE
    )
    return str(federation.kubeconfig), str(hub)


async def test_doctor_passes_an_install_as_the_docs_make_it(federation, installed):
    admin, hub = installed
    rc, report = await doctor_json("--kubeconfig", admin, "-n", USERS_NAMESPACE, "--kernels", "--hub-namespace", HUB_NAMESPACE)
    # the one warning: no Liqo install's settings here, so Liqo's default (every Secret reflected) is assumed
    assert rc == 0 and [(f["area"], f["subject"], f["status"]) for f in not_ok(report)] == [("reflection", "Secrets", "warn")], not_ok(
        report
    )
    free = {s["site"]: s["resources"].get("nvidia.com/gpu", {}).get("free") for s in report["capacity"]["sites"]}
    assert free == {"origin": 2, "donor-1": 8}, (report["capacity"], node_states(federation))

    # as the hub (install's own check), and with the hub's own token: every permission the
    # hub needs is granted, as the API server's RBAC judges it; what that identity may not read
    # (the admin's side: storage classes, Liqo's settings) is a warning
    for argv in (("--kubeconfig", admin, "--as", HUB_USER), ("--kubeconfig", hub, "--hub-namespace", HUB_NAMESPACE)):
        rc, report = await doctor_json(*argv, "-n", USERS_NAMESPACE, "--kernels")
        permissions = [f for f in report["findings"] if f["area"] == "rbac"]
        assert len(permissions) > 10 and all(f["status"] == "ok" for f in permissions), permissions
        assert rc == 0 and {(f["area"], f["status"]) for f in not_ok(report)} <= {("reflection", "warn"), ("storage", "warn")}, not_ok(
            report
        )


async def test_a_grant_left_out_of_the_install_fails_and_names_its_manifest(federation, installed):
    admin, _hub = installed
    # the admin skipped hub_config/rbac-kernels.yaml's binding
    federation.origin.store.delete("rolebindings.rbac.authorization.k8s.io", USERS_NAMESPACE, "gpuburst-hub-kernels")
    for _ in range(100):  # the authorizer's informer sees the deletion a moment later
        rc, report = await doctor_json("--kubeconfig", admin, "-n", USERS_NAMESPACE, "--kernels", "--as", HUB_USER)
        if rc == 1:
            break
        await asyncio.sleep(0.1)
    failed = [f for f in report["findings"] if f["status"] == "fail"]
    assert rc == 1 and failed, report["findings"]
    assert all(f["area"] == "rbac" and "rbac-kernels.yaml" in f["fix"] for f in failed), failed
