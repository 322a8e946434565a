"""One site on the real control plane: its ControlPlane, and the process kubelet joined to it.

The same surface as ``sim.cluster.Cluster`` (name, cluster_id, url, store, kubelet, pool,
virtual_kubelets, start/stop), so the federation and Liqo's reflection run unchanged on it.
The kubelet joins as a node agent does: it registers its Nodes (capacity with ``nvidia.com/gpu``
and MIG resources, their labels, Ready, the port of its API: kubeletapi.py), renews each node's
Lease in ``kube-node-lease`` every ``LEASE_RENEW_S`` (kube-controller-manager's node lifecycle
controller judges health by it, and evicts from a node whose lease lapses), writes
``pods/status``, and removes a deleted pod only when its containers have stopped. Claims of the default StorageClass get their volumes from a
provisioner (volumes.py), as a cluster's storage driver makes them. kube-scheduler binds the
pods; garbage collection, namespace deletion and the other controllers are
kube-controller-manager's own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.cluster import NodeKubelet, node_object, ready_conditions
from jupyter_gpuburst.sim.config import ClusterConfig
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube.controlplane import REQUEST_TIMEOUT_S, ControlPlane
from jupyter_gpuburst.sim.kube.kubeletapi import KubeletApi
from jupyter_gpuburst.sim.kube.remotestore import RemoteStore
from jupyter_gpuburst.sim.kube.volumes import Provisioner
from jupyter_gpuburst.sim.kubelet import AddressPool, Kubelet
from jupyter_gpuburst.sim.kubelet.devices import DevicePlugin

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LEASE_RENEW_S = 10.0  # the kubelet's nodeLeaseRenewInterval
LEASE_DURATION_S = 40  # the kubelet's nodeLeaseDurationSeconds
NODE_STATUS_REPORT_S = 300.0  # the kubelet's nodeStatusReportFrequency
NODE_LEASE_NAMESPACE = "kube-node-lease"
# what the node agents read through their cache
CACHED = (
    "pods",
    "nodes",
    "services",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "events",
    # a Service without a selector resolves in pods to its slices' addresses (kubelet/servicenames.py)
    "endpointslices.discovery.k8s.io",
)
# libyaml's loader where PyYAML has it: the pure-Python one took 1.9 s for Liqo's 28 CRDs
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
LIQO_CACHED = (f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}",)


class KubeSite:
    """A site whose API is a real kube-apiserver. ``index`` picks its pod network as Cluster does."""

    def __init__(self, config: ClusterConfig, index: int, state_dir: Path, *, bin_dir: Path | None = None, liqo_crds: Path | None = None):
        if not 0 <= index < 200:
            raise ValueError(f"cluster index must be in [0, 200), got {index}")
        self.config = config
        self.name = config.name
        self.cluster_id = config.id
        self.state_dir = Path(state_dir)
        self.control_plane = ControlPlane(config.name, self.state_dir / "control-planes", bin_dir)
        self.liqo_crds = liqo_crds if liqo_crds is not None else self.control_plane.bin_dir.parent / "liqo-crds"
        network = ipaddress.ip_network(f"127.{10 + index}.0.0/16")
        self._node_ips = network.hosts()
        self.pool = AddressPool(f"127.{10 + index}.128.0/17", random_start=True)
        self._devices = DevicePlugin({name: node.devices for node in config.nodes for name in node.names()})
        self.virtual_kubelets: dict[str, NodeKubelet] = {}
        self.store: RemoteStore | None = None
        self.kubelet: Kubelet | None = None
        self.provisioner: Provisioner | None = None
        self.kubelet_api: KubeletApi | None = None
        self._leases: asyncio.Task | None = None
        self._lease_nodes: list[str] = []
        self._own_nodes: set[str] = set()  # our kubelet's (a virtual node's status is its virtual kubelet's)
        self.running = False

    @property
    def url(self) -> str:
        return self.control_plane.url

    @property
    def admin_kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    def credentials(self) -> tuple[str, str, str]:
        cp = self.control_plane
        return str(cp.pki.ca), str(cp.harness_cert.cert), str(cp.harness_cert.key)

    async def start(self) -> None:
        try:
            await self.control_plane.start()
            await self._install_liqo_crds()
            cached = CACHED + (LIQO_CACHED if self.liqo_crds.is_dir() else ())
            self.store = RemoteStore(self.url, self.credentials(), cached)
            await self.store.start()
            pki = self.control_plane.pki
            serving = pki.serving("kubelet", ["127.0.0.1", self.name])
            self.kubelet_api = KubeletApi(self.store, self._node_kubelet, pki.ca, (serving.cert, serving.key))
            await self.kubelet_api.start()
            self.register_nodes()
            self.provisioner = Provisioner(self.store)
            await self.provisioner.start()
            self._leases = asyncio.create_task(self._renew_leases(), name=f"leases-{self.name}")
            self.kubelet = Kubelet(
                self.store,  # type: ignore[arg-type] - RemoteStore serves the Store interface the kubelet uses
                self.pool,
                state_dir=self.state_dir / self.name,
                image_settings=self.config.images,
                devices=self._devices,
            )
            await self.kubelet.start()
        except BaseException:
            await self.stop()
            raise
        self.running = True

    async def stop(self) -> None:
        self.running = False
        if self._leases is not None:
            self._leases.cancel()
            await asyncio.gather(self._leases, return_exceptions=True)
        if self.kubelet_api is not None:
            await self.kubelet_api.stop()
        if self.kubelet is not None:
            await self.kubelet.stop()
        if self.provisioner is not None:
            await self.provisioner.stop()
        if self.store is not None:
            await self.store.stop()
        await self.control_plane.stop()

    # -- nodes ---------------------------------------------------------------------------------

    @property
    def kubelet_port(self) -> int | None:
        """The port every node of this site reports for its kubelet's API (None before start)."""
        return self.kubelet_api.port if self.kubelet_api is not None else None

    def _node_kubelet(self, namespace: str, name: str) -> NodeKubelet:
        """Who runs the pod: the virtual kubelet of its node (Liqo's), else ours."""
        assert self.store is not None and self.kubelet is not None
        node = (self.store.get("pods", namespace, name).get("spec") or {}).get("nodeName") or ""
        return self.virtual_kubelets.get(node, self.kubelet)

    def register_nodes(self) -> list[Obj]:
        assert self.store is not None
        now = defaults.timestamp(self.store.now())
        created = []
        for node in self.config.nodes:
            for name in node.names():
                obj = node_object(name, node, str(next(self._node_ips)), now, kubelet_port=self.kubelet_port)
                created.append(self.store.create("nodes", obj))
                self._lease_nodes.append(name)
                self._own_nodes.add(name)
        return created

    def add_lease_node(self, name: str) -> None:
        """Renew ``name``'s lease too (a virtual node, whose virtual kubelet keeps it alive)."""
        self._lease_nodes.append(name)

    def drop_lease_node(self, name: str) -> None:
        if name in self._lease_nodes:
            self._lease_nodes.remove(name)

    async def _renew_leases(self) -> None:
        assert self.store is not None
        while True:
            for name in self._heartbeat_nodes():
                try:
                    await asyncio.to_thread(self._renew, name)
                    if name in self._own_nodes:
                        await asyncio.to_thread(self._sync_status, name)
                except (ApiError, httpx.HTTPError) as exc:
                    log.debug("lease or status of node %s not renewed: %s", name, exc)
            await asyncio.sleep(LEASE_RENEW_S)

    def _sync_status(self, name: str) -> None:
        """What the kubelet's status sync does (every nodeStatusUpdateFrequency, 10 s) against
        the node it reads: where that differs from what the kubelet reports, it posts its own.
        A lease renewed late once (the node agents under load) lets the node lifecycle controller
        set Ready Unknown; a kubelet sets it back at its next sync. Posting Ready only at
        registration left such a node NotReady for good (a 200-student rush on the real control
        plane lost every donor node so). The heartbeats are refreshed every
        ``NODE_STATUS_REPORT_S`` as well."""
        store = self.store
        assert store is not None
        node = store.get("nodes", None, name)
        conditions = (node.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), {})
        heartbeat = defaults.parse_timestamp(ready.get("lastHeartbeatTime"))
        fresh = heartbeat is not None and (store.now() - heartbeat).total_seconds() < NODE_STATUS_REPORT_S
        if ready.get("status") == "True" and fresh:
            return
        now = defaults.timestamp(store.now())
        wanted = {c["type"]: c for c in ready_conditions(True, now)}
        for condition in conditions:
            want = wanted.get(condition.get("type"))
            if want is not None and condition.get("status") == want["status"]:
                want["lastTransitionTime"] = condition.get("lastTransitionTime", now)
        # a condition the kubelet does not own (another controller's) stays as it is
        others = [c for c in conditions if c.get("type") not in wanted]
        node.setdefault("status", {})["conditions"] = [*wanted.values(), *others]
        store.replace("nodes", node, "status")
        if ready.get("status") != "True":
            log.info("node %s: posted Ready again (it was %s: %s)", name, ready.get("status"), ready.get("reason"))

    def _heartbeat_nodes(self) -> list[str]:
        """Our kubelet's nodes, and each virtual node while its peering is up: Liqo's virtual
        kubelet renews its node's lease as a kubelet does (without it the node lifecycle
        controller finds the virtual node silent after its grace period, sets Ready Unknown and
        taints it unreachable, and the hub takes the donor for gone)."""
        virtual = [name for name, vk in self.virtual_kubelets.items() if getattr(vk, "ready", True)]
        return [*self._lease_nodes, *(name for name in virtual if name not in self._lease_nodes)]

    def _renew(self, name: str) -> None:
        store = self.store
        assert store is not None
        stamp = defaults.micro_timestamp(store.now())
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": stamp}
        try:
            lease = store.get("leases", NODE_LEASE_NAMESPACE, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            node = store.get("nodes", None, name)
            owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            store.create(
                "leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [owner]},
                    "spec": spec,
                },
            )
            return
        lease["spec"].update(spec)
        store.replace("leases", lease)

    # -- Liqo ----------------------------------------------------------------------------------

    async def _install_liqo_crds(self) -> None:
        """Liqo's CRDs of the group this product speaks (``liqo.OFFLOADING_GROUP``: NamespaceOffloading,
        VirtualNode, VkOptionsTemplate, ...), from the build (Liqo's Go module). Liqo's other
        groups (networking, IPAM, authentication) are its own machinery, which nothing here reads
        or writes; each CRD costs the API server an OpenAPI rebuild, and all 28 took over half of
        a site's start."""
        if not self.liqo_crds.is_dir():
            log.warning("Liqo's CRDs are not in %s: Liqo objects are not validated on %s", self.liqo_crds, self.name)
            return
        await self.install_liqo_crds(sorted(p.name for p in self.liqo_crds.glob(f"{liqo.OFFLOADING_GROUP}_*.yaml")))

    async def install_liqo_crds(self, files: list[str]) -> list[dict[str, Any]]:
        """Liqo's CRDs named by their files in the build's ``liqo_crds``, each Established before
        this returns; the CRDs as sent."""
        base = f"{self.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        async with self.control_plane.harness_client(timeout=REQUEST_TIMEOUT_S) as client:
            crds = []
            for file in files:
                crd = yaml.load((self.liqo_crds / file).read_text(), Loader=SAFE_LOADER)
                sent = time.monotonic()
                response = await client.post(base, json=crd)
                log.debug("Liqo CRD %s answered %s by %s in %.1f s", file, response.status_code, self.name, time.monotonic() - sent)
                if response.status_code not in (200, 201, 409):
                    raise RuntimeError(f"Liqo CRD {file} refused by {self.name}: {response.text[:300]}")
                crds.append(crd)
            for name in (crd["metadata"]["name"] for crd in crds):
                for _ in range(300):
                    crd = (await client.get(f"{base}/{name}")).json()
                    conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                    if conditions.get("Established") == "True":
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise RuntimeError(f"Liqo CRD {name} not Established on {self.name}")
        return crds
