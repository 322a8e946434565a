"""`gpuburst uninstall` on the local federation: everything the hub made on the origin goes, the
pods first (on a donor too) and the NamespaceOffloadings only once they are gone, then the donors'
kernel namespaces and the warm pools' PriorityClass; what is not ours, and the user namespace
with the students' volumes, stays."""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from jupyter_gpuburst import cli
from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.hub.address import manifests as address
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

USERS = "jhub-users"
KERNELS = f"{USERS}-kernels-donor-1"
PC = "priorityclasses.scheduling.k8s.io"
NETPOL = "networkpolicies.networking.k8s.io"
SLICES = "endpointslices.discovery.k8s.io"
SLEEPER = ["sleep", "600"]


def pod(name: str, component: str, donor: bool = False, **spec) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {keys.COMPONENT_LABEL: component}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": SLEEPER}], **spec},
    }
    if donor:
        body["spec"]["nodeName"] = "donor-1"
        body["spec"]["tolerations"] = [liqo.virtual_node_toleration()]
    return body


def what_the_hub_made(store) -> None:
    for ns in (USERS, KERNELS):
        store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        store.create(NSOFF, liqo.namespace_offloading(ns), ns)
    store.create(
        PC, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gpuburst-warm-pool"}, "value": -10}
    )
    store.create("pods", pod("jupyter-alice", "singleuser-server", donor=True), USERS)
    store.create("pods", pod("gpuburst-kernel-k1", keys.KERNEL_COMPONENT, donor=True), KERNELS)
    store.create(
        "pods", pod("gpuburst-pool-origin-1", keys.POOL_COMPONENT, nodeName="origin-gpu", priorityClassName="gpuburst-warm-pool"), USERS
    )
    store.create("pods", pod("someone-elses", "other", nodeName="origin-cpu"), USERS)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gpuburst-kernel-k1", "labels": {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT}},
    }
    store.create("secrets", secret, KERNELS)
    for name, labels in (
        ("gpuburst-kernel-k1", {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT}),
        ("gpuburst-kernels", {"app.kubernetes.io/name": "jupyter-gpuburst"}),
    ):
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {"podSelector": {}},
        }
        store.create(NETPOL, policy, KERNELS if name == "gpuburst-kernel-k1" else USERS)
    # the hub's address, as the hub keeps it (hub/address/)
    store.create("services", address.service("hub", USERS, {"hub": 8081}), USERS)
    store.create(SLICES, address.endpoint_slice("hub", USERS, "10.1.2.3", {"hub": 8081}), USERS)
    other = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "not-ours"}, "spec": {"ports": [{"port": 80}]}}
    store.create("services", other, USERS)


def exists(store, rtype: str, namespace: str | None, name: str) -> bool:
    try:
        found = store.get(rtype, namespace, name)
    except ApiError:
        return False
    return not found["metadata"].get("deletionTimestamp")


async def uninstall(federation, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = ["uninstall", "-n", USERS, "--kubeconfig", str(federation.kubeconfig_path), "--context", "origin", "--timeout", "60", *args]

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return cli.main(argv)

    code = await asyncio.to_thread(run)
    return code, out.getvalue()


async def test_uninstall_removes_what_the_hub_made_pods_before_offloadings(federation):
    store, donor = federation.origin.store, federation.donors["donor-1"].store
    what_the_hub_made(store)
    for name, ns in (("jupyter-alice", USERS), ("gpuburst-kernel-k1", KERNELS)):
        await wait_until(
            lambda name=name, ns=ns: store.get("pods", ns, name)["status"].get("phase") == "Running",
            timeout=30,
            what=f"{name} runs on the donor",
        )
    assert donor.list("pods", None)[0], "the donor runs their copies"

    code, dry = await uninstall(federation, "--dry-run")
    assert code == 0, dry
    for line in (
        f"would delete pod {USERS}/jupyter-alice",
        f"would delete pod {KERNELS}/gpuburst-kernel-k1",
        f"would delete pod {USERS}/gpuburst-pool-origin-1",
        f"would delete secret {KERNELS}/gpuburst-kernel-k1",
        f"would delete networkpolicy {KERNELS}/gpuburst-kernel-k1",
        f"would delete networkpolicy {USERS}/gpuburst-kernels",
        f"would delete service {USERS}/hub",
        f"would delete endpointslice {USERS}/hub",
        f"would delete namespaceoffloading {USERS}/offloading",
        f"would delete namespace {KERNELS}",
        "would delete priorityclass gpuburst-warm-pool",
    ):
        assert line in dry, dry
    assert "someone-elses" not in dry and "not-ours" not in dry and f"namespace {USERS}\n" not in dry
    assert exists(store, "pods", USERS, "jupyter-alice") and exists(store, PC, None, "gpuburst-warm-pool")  # nothing deleted

    # the order as the API server saw it: no NamespaceOffloading goes while one of our pods is there
    seen: list[tuple[str, str]] = []

    async def follow(rtype: str) -> None:
        async for etype, obj in store.watch(rtype):
            if etype == "DELETED" or obj["metadata"].get("deletionTimestamp"):
                seen.append((rtype, obj["metadata"]["name"]))

    watchers = [asyncio.create_task(follow(rtype)) for rtype in ("pods", NSOFF)]
    code, out = await uninstall(federation)
    for task in watchers:
        task.cancel()
    assert code == 0, out
    first_offloading = next(i for i, (rtype, _) in enumerate(seen) if rtype == NSOFF)
    gone_pods = {name for rtype, name in seen[:first_offloading] if rtype == "pods"}
    assert {"jupyter-alice", "gpuburst-kernel-k1", "gpuburst-pool-origin-1"} <= gone_pods, seen

    assert not exists(store, "pods", USERS, "jupyter-alice") and not exists(store, "pods", KERNELS, "gpuburst-kernel-k1")
    assert not [p for p in donor.list("pods", None)[0] if not p["metadata"].get("deletionTimestamp")], "copies left on the donor"
    assert not exists(store, "secrets", KERNELS, "gpuburst-kernel-k1") and not exists(store, NETPOL, USERS, "gpuburst-kernels")
    assert not exists(store, NSOFF, USERS, "offloading") and not exists(store, NSOFF, KERNELS, "offloading")
    assert not exists(store, "namespaces", None, KERNELS) and not exists(store, PC, None, "gpuburst-warm-pool")
    assert not exists(store, "services", USERS, "hub") and not exists(store, SLICES, USERS, "hub")
    assert exists(store, "services", USERS, "not-ours")
    # not ours, or the students' files: kept, and said so
    assert exists(store, "pods", USERS, "someone-elses") and exists(store, "namespaces", None, USERS)
    assert f"kubectl delete namespace {USERS}" in out


async def test_uninstall_says_what_is_wrong_with_its_arguments(tmp_path, capsys):
    assert cli.main(["uninstall", "-n", USERS, "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "cannot load kubeconfig" in capsys.readouterr().err
