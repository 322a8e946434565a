"""One emulated cluster: object store, API server, scheduler and process kubelet."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Protocol

from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.config import ClusterConfig, NodeConfig
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubelet import AddressPool, Kubelet
from jupyter_gpuburst.sim.kubelet.devices import DevicePlugin
from jupyter_gpuburst.sim.scheduler import Scheduler
from jupyter_gpuburst.sim.storage import VolumeBinding
from jupyter_gpuburst.sim.store import Store

Obj = dict[str, Any]
KUBELET_VERSION = "v1.31.0"


class NodeKubelet(Protocol):
    """What the API server asks of a node's kubelet for pods/log and pods/exec."""

    def log_path(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None: ...

    async def open_exec(self, namespace: str, name: str, container: str | None, command: list[str], *, stdin: bool, tty: bool) -> Any: ...


def node_object(name: str, node: NodeConfig, internal_ip: str, now: str, kubelet_port: int | None = None) -> Obj:
    """The Node a real kubelet would register for ``node`` (Ready); ``kubelet_port``, where its
    API is served (a real control plane's pods/exec and pods/log go there)."""
    capacity = {"cpu": node.cpu, "memory": node.memory, "pods": str(node.pods), "ephemeral-storage": "100Gi"}
    capacity.update({res: str(n) for res, n in node.resources.items()})
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **node.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": ready_conditions(True, now),
            "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
            **daemon_endpoints(kubelet_port),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "6.1.0-sim",
                "containerRuntimeVersion": "containerd://1.7.0-sim",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def daemon_endpoints(kubelet_port: int | None) -> Obj:
    """A node status's ``daemonEndpoints``, where its kubelet serves its API."""
    return {"daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}}} if kubelet_port else {}


def ready_conditions(ready: bool, now: str, reason: str | None = None, message: str | None = None) -> list[Obj]:
    """A node's conditions: healthy pressure conditions and Ready (True or False)."""
    conds = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conds.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": reason or ("KubeletReady" if ready else "KubeletNotReady"),
            "message": message or ("kubelet is posting ready status" if ready else "kubelet stopped posting node status"),
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return conds


class Cluster:
    """A cluster with its own API endpoint. ``index`` picks its pod network 127.(10+index).0.0/16."""

    def __init__(
        self, config: ClusterConfig, index: int, state_dir: Path, *, faults: Faults | None = None, host: str = "127.0.0.1", port: int = 0
    ):
        if not 0 <= index < 200:
            raise ValueError(f"cluster index must be in [0, 200), got {index}")
        self.config = config
        self.name = config.name
        self.cluster_id = config.id
        self.store = Store()
        network = ipaddress.ip_network(f"127.{10 + index}.0.0/16")
        # Node addresses come from 127.(10+index).0.0/24, pod addresses from the rest.
        self._node_ips = network.hosts()
        self.pool = AddressPool(f"127.{10 + index}.128.0/17", random_start=True)
        devices = DevicePlugin({name: node.devices for node in config.nodes for name in node.names()})
        self.kubelet = Kubelet(
            self.store, self.pool, state_dir=Path(state_dir) / config.name, image_settings=config.images, devices=devices
        )
        self.volumes = VolumeBinding(self.store)
        self.scheduler = Scheduler(self.store, host=config.name, volumes=self.volumes)
        # Node name -> the kubelet that serves pods/log and pods/exec for its pods: this cluster's
        # own, or a Liqo virtual kubelet (a Peering) that forwards to the donor's pod.
        self.virtual_kubelets: dict[str, NodeKubelet] = {}
        self.api = ApiServer(self.store, host=host, port=port, faults=faults, log_reader=self._log_path, exec_opener=self._open_exec)
        self.running = False

    def _node_kubelet(self, namespace: str, name: str) -> NodeKubelet:
        try:
            node = (self.store.get("pods", namespace, name).get("spec") or {}).get("nodeName")
        except ApiError:
            return self.kubelet
        return self.virtual_kubelets.get(node or "", self.kubelet)

    def _log_path(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None:
        return self._node_kubelet(namespace, name).log_path(namespace, name, container, previous)

    async def _open_exec(self, namespace: str, name: str, container: str | None, command: list[str], *, stdin: bool, tty: bool) -> Any:
        return await self._node_kubelet(namespace, name).open_exec(namespace, name, container, command, stdin=stdin, tty=tty)

    @property
    def url(self) -> str:
        return self.api.url

    def register_nodes(self) -> list[Obj]:
        now = defaults.timestamp(self.store.now())
        created = []
        for node in self.config.nodes:
            for name in node.names():
                created.append(self.store.create("nodes", node_object(name, node, str(next(self._node_ips)), now)))
        return created

    async def start(self) -> None:
        self.register_nodes()
        await self.volumes.start()
        await self.kubelet.start()
        await self.scheduler.start()
        await self.api.start()
        self.running = True

    async def stop(self) -> None:
        self.running = False
        await self.api.stop()
        await self.scheduler.stop()
        await self.volumes.stop()
        await self.kubelet.stop()
        self.store.close_watches()
