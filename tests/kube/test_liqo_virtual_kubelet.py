"""Offloading through Liqo itself, between two real control planes: Liqo's own virtual kubelet
on the origin and its controller manager's offloading module on the donor (Liqo v1.1.2, built
by `make kube` from Liqo's Go module), in place of our reflection, for one pod.

What this shows of Liqo and pins in our emulator (sim/peering.py, sim/reflection.py): the
virtual node registers Ready with its VirtualNode's quota as capacity (GPUs included); a pod
bound to it in a mapped namespace becomes a ShadowPod in the donor's namespace, which the
donor's controller makes into a pod that the donor's kube-scheduler places on a GPU node and our
node agent runs; its status comes back to the origin's pod; pods/log and pods/exec through the
origin's kube-apiserver reach it (kube-apiserver -> Liqo's virtual kubelet -> the donor's
kube-apiserver -> our node agent's kubelet API); deleting the origin's pod deletes the donor's.

What it leaves out, as the rest of Liqo's install would do it (docs/emulator.md, "Liqo's own
virtual kubelet"): the peering itself (identities, the tenant and its ResourceSlice, which make
the VirtualNode and the kubeconfig Secret written here), the namespace offloading controller of
the origin (which turns a NamespaceOffloading into the NamespaceMap written here and makes the
donor's namespace), the webhook that gives an offloaded namespace's pods the virtual node's
toleration (given here in the pod), and the network fabric (``--disable-ip-reflection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers.kubetier import admin_clients
from kubernetes_asyncio import client

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube import binaries
from jupyter_gpuburst.sim.reflection import root_ca_remote_name
from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod, wait_until

pytestmark = pytest.mark.kube

FOREIGN_ID = "donor-liqo"  # the donor as Liqo's virtual kubelet knows it (not our peering's id)
NODE = f"liqo-{FOREIGN_ID}"
TENANT = f"liqo-tenant-{FOREIGN_ID}"
NAMESPACE = "liqo-offloaded"
GREETING = "hello from the donor"
# what Liqo's programs read on each side: the controller manager maps every Liqo group at its
# start (pkg/utils/mapper) and its offloading module's controllers also watch networking and
# authentication kinds, whose modules are off
ORIGIN_CRDS = ("core.liqo.io_foreignclusters.yaml",)
DONOR_CRDS = (
    "core.liqo.io_foreignclusters.yaml",
    "ipam.liqo.io_networks.yaml",
    "authentication.liqo.io_identities.yaml",
    "authentication.liqo.io_tenants.yaml",
    "networking.liqo.io_configurations.yaml",
    "networking.liqo.io_connections.yaml",
    "networking.liqo.io_gatewayclients.yaml",
    "networking.liqo.io_gatewayservers.yaml",
)
QUOTA = {"cpu": "8", "memory": "32Gi", "pods": "20", "nvidia.com/gpu": "2"}


@pytest.fixture
def liqo_bin() -> Path:
    try:
        return binaries.liqo_locate()
    except binaries.ControlPlaneMissing as exc:
        pytest.skip(str(exc))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _install_crds(site: Any, files: tuple[str, ...]) -> None:
    crds = await site.install_liqo_crds(list(files))

    async def listed() -> bool:
        # Established, and in discovery too: a controller manager that starts before its kinds are
        # listed there stops at once ("failed to get API group resources")
        async with site.control_plane.harness_client(timeout=10.0) as http:
            for crd in crds:
                plural, group = crd["spec"]["names"]["plural"], crd["spec"]["group"]
                for version in crd["spec"]["versions"]:
                    answer = await http.get(f"{site.url}/apis/{group}/{version['name']}")
                    if answer.status_code != 200 or plural not in {r["name"] for r in answer.json()["resources"]}:
                        return False
        return True

    await wait_until(listed, timeout=60, what=f"Liqo's CRDs listed in {site.name}'s discovery", interval=0.2)


async def _post(site: Any, path: str, obj: dict, status: dict | None = None) -> None:
    async with site.control_plane.harness_client(timeout=10.0) as http:
        response = await http.post(f"{site.url}{path}", json=obj)
        assert response.status_code == 201, response.text[:300]
        if status is not None:
            name = obj["metadata"]["name"]
            patched = await http.patch(
                f"{site.url}{path}/{name}/status", json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
            )
            assert patched.status_code == 200, patched.text[:300]


@contextlib.asynccontextmanager
async def _program(argv: list[str], log: Path, env: dict[str, str]) -> AsyncIterator[subprocess.Popen]:
    with log.open("w") as out:
        # in the test run's process group: a stop of the tier's group reaches it too
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        yield process
        assert process.poll() is None, f"{argv[0]} exited ({process.returncode}): {log.read_text()[-2000:]}"
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 15)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)


async def _peer(origin: Any, donor: Any) -> None:
    """What Liqo's peering would have made on the origin: the tenant namespace, the donor's
    kubeconfig in a Secret, its ForeignCluster and the VirtualNode with the granted quota; and
    what its namespace offloading would have made: the donor's namespace and the NamespaceMap."""
    for name in ("liqo", TENANT, NAMESPACE):
        origin.store.create("namespaces", {"metadata": {"name": name}})
    donor.store.create("namespaces", {"metadata": {"name": "liqo"}})
    remote_namespace = liqo.remote_namespace_name(NAMESPACE, origin.cluster_id)
    donor.store.create("namespaces", {"metadata": {"name": remote_namespace}})
    # Liqo finds a cluster's objects by this label (ForeignCluster, VirtualNode, NamespaceMap)
    labels = {liqo.REMOTE_CLUSTER_ID_LABEL: FOREIGN_ID}
    kubeconfig = donor.admin_kubeconfig.read_text()
    origin.store.create(
        "secrets", {"metadata": {"name": "donor-kubeconfig"}, "stringData": {"kubeconfig": kubeconfig}, "type": "Opaque"}, TENANT
    )
    await _post(
        origin,
        "/apis/core.liqo.io/v1beta1/foreignclusters",
        {
            "apiVersion": "core.liqo.io/v1beta1",
            "kind": "ForeignCluster",
            "metadata": {"name": FOREIGN_ID, "labels": labels},
            "spec": {"clusterID": FOREIGN_ID},
        },
    )
    await _post(
        origin,
        f"/apis/offloading.liqo.io/v1beta1/namespaces/{TENANT}/virtualnodes",
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {"name": NODE, "namespace": TENANT, "labels": labels},
            "spec": {
                "clusterID": FOREIGN_ID,
                "createNode": True,
                "disableNetworkCheck": True,
                "kubeconfigSecretRef": {"name": "donor-kubeconfig"},
                "resourceQuota": {"hard": QUOTA},
            },
        },
    )
    await _post(
        origin,
        f"/apis/offloading.liqo.io/v1beta1/namespaces/{TENANT}/namespacemaps",
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceMap",
            "metadata": {"name": FOREIGN_ID, "namespace": TENANT, "labels": {**labels, "liqo.io/remoteID": FOREIGN_ID}},
            "spec": {"desiredMapping": {NAMESPACE: remote_namespace}},
        },
        status={"currentMapping": {NAMESPACE: {"phase": "Accepted", "remoteNamespace": remote_namespace}}},
    )


def _pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "offloaded", "labels": {"app": "liqo-test"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            # the toleration Liqo's webhook gives the pods of an offloaded namespace
            "tolerations": [{"key": liqo.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", f"echo {GREETING}; exec sleep 600"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


async def test_a_pod_offloads_through_liqos_own_virtual_kubelet(federation, liqo_bin, tmp_path):
    origin, donor = federation.origin, federation.donors["donor-1"]
    await asyncio.gather(_install_crds(origin, ORIGIN_CRDS), _install_crds(donor, DONOR_CRDS))
    await _peer(origin, donor)
    remote_namespace = liqo.remote_namespace_name(NAMESPACE, origin.cluster_id)
    vk = [
        str(liqo_bin / "virtual-kubelet"),
        f"--home-kubeconfig={origin.admin_kubeconfig}",
        "--foreign-kubeconfig-secret-name=donor-kubeconfig",
        f"--nodename={NODE}",
        f"--tenant-namespace={TENANT}",
        "--liqo-namespace=liqo",
        f"--home-cluster-id={origin.cluster_id}",
        f"--foreign-cluster-id={FOREIGN_ID}",
        "--disable-ip-reflection",
        "--node-ip=127.0.0.1",
        "--certificate-type=self-signed",
        f"--listen-port={_free_port()}",
        "--node-check-network=false",
    ]
    manager = [
        str(liqo_bin / "liqo-controller-manager"),
        f"--cluster-id={donor.cluster_id}",
        "--liqo-namespace=liqo",
        "--networking-enabled=false",
        "--authentication-enabled=false",
        "--ipam-server=",
        "--enable-api-server-ip-remapping=false",
        f"--health-probe-address=127.0.0.1:{_free_port()}",
        f"--metrics-address=127.0.0.1:{_free_port()}",
        f"--webhook-port={_free_port()}",
    ]
    vk_env = {"VIRTUALNODE_NAME": NODE, "POD_NAMESPACE": TENANT, "POD_NAME": "virtual-kubelet-0"}
    manager_env = {"KUBECONFIG": str(donor.admin_kubeconfig), "POD_NAMESPACE": "liqo"}
    async with (
        _program(vk, tmp_path / "virtual-kubelet.log", vk_env),
        _program(manager, tmp_path / "liqo-controller-manager.log", manager_env),
    ):
        # the virtual node: Ready, its capacity the VirtualNode's quota
        def ready_node() -> dict | None:
            try:
                node = origin.store.get("nodes", None, NODE)
            except ApiError:
                return None
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
            return node if conditions.get("Ready") == "True" else None

        node = await wait_until(ready_node, timeout=90, what="Liqo's virtual node Ready on the origin", interval=0.5)
        assert node["status"]["capacity"]["nvidia.com/gpu"] == QUOTA["nvidia.com/gpu"]

        origin.store.create("pods", _pod(), NAMESPACE)
        pod = await wait_for_pod(origin.store, NAMESPACE, "offloaded", is_running_ready, timeout=90)
        assert pod["metadata"]["labels"].get("liqo.io/shadowPod") == "true"

        # on the donor: a ShadowPod, and the pod its controller made, on a GPU node
        twin = donor.store.get("pods", remote_namespace, "offloaded")
        assert [ref["kind"] for ref in twin["metadata"].get("ownerReferences") or []] == ["ShadowPod"]
        donor_nodes, _ = donor.store.list("nodes")
        gpu_nodes = {n["metadata"]["name"] for n in donor_nodes if n["status"]["capacity"].get("nvidia.com/gpu", "0") != "0"}
        assert twin["spec"]["nodeName"] in gpu_nodes
        # the labels Liqo puts on the donor's pod, as our emulator's peering does (remote_pod)
        assert twin["metadata"]["labels"] == {
            "app": "liqo-test",
            "liqo.io/managed-by": "shadowpod",
            liqo.REFLECTION_ORIGIN_LABEL: origin.cluster_id,
            liqo.REFLECTION_DESTINATION_LABEL: FOREIGN_ID,
            "offloading.liqo.io/nodename": NODE,
        }
        # the origin's root CA, reflected under the name our emulator gives it
        assert donor.store.exists("configmaps", remote_namespace, root_ca_remote_name(origin.cluster_id))
        # the donor's events on the origin's pod, marked remote and from the donor's node, as
        # our emulator's peering reflects them

        def started() -> dict | None:
            events, _ = origin.store.list("events", NAMESPACE)
            return next((e for e in events if e["involvedObject"].get("name") == "offloaded" and e["reason"] == "Started"), None)

        event = await wait_until(started, timeout=30, what="the donor's Started event on the origin's pod", interval=0.2)
        assert event["source"] == {"component": "kubelet (remote)", "host": twin["spec"]["nodeName"]}

        # pods/log and pods/exec, through the origin's kube-apiserver to the donor's pod
        async with admin_clients(origin.admin_kubeconfig) as (api, ws):
            core = client.CoreV1Api(api)
            logs = await wait_until(
                lambda: core.read_namespaced_pod_log("offloaded", NAMESPACE), timeout=30, what="the donor pod's log through the origin"
            )
            assert logs == f"{GREETING}\n"
            out = await client.CoreV1Api(ws).connect_get_namespaced_pod_exec(
                "offloaded", NAMESPACE, command=["sh", "-c", "echo exec on $HOSTNAME"], stdout=True, stderr=True
            )
            assert out.strip() == "exec on offloaded"

        # deleting the origin's pod deletes the donor's
        origin.store.delete("pods", NAMESPACE, "offloaded")
        await wait_until(lambda: not donor.store.exists("pods", remote_namespace, "offloaded"), timeout=60, what="the donor's pod gone")
        await wait_until(lambda: not origin.store.exists("pods", NAMESPACE, "offloaded"), timeout=60, what="the origin's pod gone")
    # unpeered: Liqo's virtual kubelet leaves its node behind, as Liqo's controller removes it
    origin.store.delete("nodes", None, NODE)
    await wait_until(lambda: not origin.store.exists("nodes", None, NODE), timeout=30, what="the virtual node gone")
