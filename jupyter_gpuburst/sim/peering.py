"""Liqo emulation: one peering from the origin to a donor cluster.

What Liqo does and this emulates:

* The peering makes a VirtualNode (Liqo's offloading API group) in the tenant namespace
  ``liqo-tenant-<cluster id>`` and a Node named after the donor's cluster id, with Liqo's labels
  and virtual-node taint (``liqo.VIRTUAL_NODE_TAINT``), whose capacity and allocatable are
  the donor's grant (the ResourceSlice's resources).
* A NamespaceOffloading named ``offloading`` in an origin namespace whose clusterSelector matches
  the virtual node makes the remote namespace ``<namespace>-<origin cluster id>`` (DefaultName) in
  the donor, and its status says so.
* A pod the origin scheduler binds to the virtual node is created in the remote namespace (node
  name, node selector and node affinity, which name origin nodes, and Liqo's own toleration left
  out, and so are its priority class, priority and preemption policy: Liqo's RemotePodSpec does
  not copy them, so the donor gives it its own default priority), labelled as Liqo's ShadowPod
  controller labels it (``twin_labels``), the origin pod then labelled as offloaded
  (``liqo.OFFLOADED_POD_LABEL``); the donor's scheduler and
  kubelet place and run it; its status (phase, conditions, pod IP,
  container statuses) is reflected into the origin pod, and the donor's events about it are
  reflected as events about the origin pod (so a donor FailedScheduling shows on the origin pod,
  which stays Pending).
* A change of an offloaded pod's labels or annotations on the origin reaches the donor's pod, as
  Liqo's pod reflector updates the ShadowPod when they differ and its controller the remote pod;
  the donor's kubelet syncs the pod on that update (its Secret volumes follow their Secrets).
* A pod bound to the virtual node in a namespace without a NamespaceOffloading is left alone, as
  Liqo's virtual kubelet only reflects pods of offloaded namespaces: it stays Pending until the
  namespace is offloaded (then it is offloaded) or it is deleted.
* ConfigMaps and Secrets of an offloaded namespace are reflected into the remote namespace and
  kept in step with the origin's, their copies deleted when the origin object goes
  (``sim/reflection.py``); a pod's Secrets are copied before the pod is offloaded.
* pods/exec and pods/log of an offloaded pod are served from the donor's pod, as Liqo's virtual
  kubelet forwards them (the origin cluster routes a virtual node's pods to its Peering).
* Deleting the origin pod deletes the remote one; the origin pod goes once the remote one is gone.
* Volumes: Liqo's ``liqo`` storage class and its claim reflection (sim/storage.py); a claim of
  any other class does not follow the pod, which stays Pending on the donor.
* Unpeering or a donor outage turns the virtual node's Ready condition False; pods are no longer
  offloaded until it is back.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.core.nodeselector import selector_matches
from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.cluster import KUBELET_VERSION, Cluster, daemon_endpoints, ready_conditions
from jupyter_gpuburst.sim.errors import ApiError, bad_request
from jupyter_gpuburst.sim.reflection import REFLECTED_TYPES, ConfigurationReflector
from jupyter_gpuburst.sim.storage import install_liqo_class, reflect_claims

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NSOFF = f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}"
VNODES = f"{liqo.VIRTUAL_NODE_PLURAL}.{liqo.OFFLOADING_GROUP}"
_REFLECTED_STATUS = ("phase", "podIP", "podIPs", "containerStatuses", "startTime", "reason", "message")


def tenant_namespace(cluster_id: str) -> str:
    return f"liqo-tenant-{cluster_id}"


def virtual_node_object(cluster_id: str, grant: dict[str, str], internal_ip: str, now: str, kubelet_port: int | None = None) -> Obj:
    """The origin's Node for a donor: Liqo's labels and taint, the grant as capacity; where its
    virtual kubelet serves pods/exec and pods/log when the origin's API server asks a kubelet."""
    capacity = {"pods": "110", **{k: str(v) for k, v in grant.items()}}
    labels = {
        **liqo.virtual_node_labels(cluster_id),
        "kubernetes.io/hostname": cluster_id,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/role": "agent",
        "type": "virtual-kubelet",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": cluster_id, "labels": labels},
        "spec": {"taints": [liqo.virtual_node_taint()]},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": ready_conditions(True, now, "KubeletReady", "The Liqo Virtual Kubelet is posting ready status"),
            "addresses": [{"type": "InternalIP", "address": internal_ip}],
            **daemon_endpoints(kubelet_port),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "osImage": "",
                "kernelVersion": "",
                "containerRuntimeVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def virtual_node_cr(cluster_id: str, grant: dict[str, str]) -> Obj:
    """The VirtualNode custom resource behind the virtual node."""
    return {
        "apiVersion": liqo.OFFLOADING_API_VERSION,
        "kind": liqo.VIRTUAL_NODE_KIND,
        "metadata": {"name": cluster_id, "namespace": tenant_namespace(cluster_id), "labels": liqo.virtual_node_labels(cluster_id)},
        "spec": {
            "clusterID": cluster_id,
            "createNode": True,
            "resourceQuota": {"hard": {k: str(v) for k, v in grant.items()}},
            "labels": liqo.virtual_node_labels(cluster_id),
        },
    }


def twin_labels(pod: Obj, origin_id: str, donor_id: str, node_name: str) -> dict[str, str]:
    """The labels of an origin pod's donor twin: the pod's own but Liqo's mark of an offloaded
    pod, and those Liqo adds (``liqo.OFFLOADED_POD_LABEL`` says where from)."""
    labels = {k: v for k, v in (pod["metadata"].get("labels") or {}).items() if k != liqo.OFFLOADED_POD_LABEL}
    return {
        **labels,
        liqo.REFLECTION_ORIGIN_LABEL: origin_id,
        liqo.REFLECTION_DESTINATION_LABEL: donor_id,
        liqo.REMOTE_POD_NODE_LABEL: node_name,
        liqo.MANAGED_BY_LABEL: liqo.MANAGED_BY_SHADOWPOD,
    }


def remote_pod(pod: Obj, remote_namespace: str, labels: dict[str, str]) -> Obj:
    """The donor's twin of an origin pod, labelled ``labels`` (``twin_labels``)."""
    meta = pod["metadata"]
    spec = copy.deepcopy(pod["spec"])
    for key in ("nodeName", "nodeSelector", "priority", "priorityClassName", "preemptionPolicy"):
        spec.pop(key, None)
    affinity = spec.get("affinity") or {}
    affinity.pop("nodeAffinity", None)
    if not affinity:
        spec.pop("affinity", None)
    spec["tolerations"] = [t for t in spec.get("tolerations") or [] if not liqo.is_virtual_node_taint(t)] or None
    if spec["tolerations"] is None:
        del spec["tolerations"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": remote_namespace,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": spec,
    }


class Peering:
    """Origin -> donor offloading for one donor."""

    def __init__(self, origin: Cluster, donor: Cluster, grant: dict[str, str], node_ip: str):
        self.origin = origin
        self.donor = donor
        self.grant = dict(grant)
        self.cluster_id = donor.cluster_id
        self.node_name = donor.cluster_id
        self.node_ip = node_ip
        self.ready = False
        self._tasks: list[asyncio.Task] = []
        self._remote: dict[tuple[str, str], tuple[str, str]] = {}  # donor (ns, name) -> origin (ns, name)
        self._reflector: ConfigurationReflector | None = None  # made by start(): see there

    @property
    def reflector(self) -> ConfigurationReflector:
        if self._reflector is None:
            raise RuntimeError(f"the peering with {self.cluster_id} has not started")
        return self._reflector

    def remote_namespace(self, namespace: str) -> str:
        return liqo.remote_namespace_name(namespace, self.origin.cluster_id)

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Peer: tenant namespace, VirtualNode, virtual Node, then reflect."""
        o = self.origin.store
        # the sites' stores as they are now: a site on the real control plane has its store only
        # once it has started, after this peering was made
        self._reflector = ConfigurationReflector(o, self.donor.store, self.origin.cluster_id, self.cluster_id, self._reflected_namespace)
        install_liqo_class(o)
        tenant = tenant_namespace(self.cluster_id)
        try:
            o.get("namespaces", None, tenant)
        except ApiError:
            o.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}})
        try:
            o.get(VNODES, tenant, self.cluster_id)
        except ApiError:
            o.create(VNODES, virtual_node_cr(self.cluster_id, self.grant), tenant)
        now = defaults.timestamp(o.now())
        try:
            o.get("nodes", None, self.node_name)
            self.set_ready(True)
        except ApiError:
            port = getattr(self.origin, "kubelet_port", None)  # a site on the real control plane
            o.create("nodes", virtual_node_object(self.cluster_id, self.grant, self.node_ip, now, port))
        self.ready = True
        self.origin.virtual_kubelets[self.node_name] = self
        self._tasks = [
            asyncio.create_task(self._origin_pods(), name=f"peering-{self.cluster_id}-pods"),
            asyncio.create_task(self._origin_offloadings(), name=f"peering-{self.cluster_id}-nso"),
            asyncio.create_task(self._donor_pods(), name=f"peering-{self.cluster_id}-remote"),
            asyncio.create_task(self._donor_events(), name=f"peering-{self.cluster_id}-events"),
            *(asyncio.create_task(self.reflector.run(rtype), name=f"peering-{self.cluster_id}-{rtype}") for rtype in REFLECTED_TYPES),
        ]
        for task in self._tasks:
            task.add_done_callback(_say_if_it_died)

    async def stop(self) -> None:
        if self.origin.virtual_kubelets.get(self.node_name) is self:
            del self.origin.virtual_kubelets[self.node_name]
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def unpeer(self) -> None:
        """Stop offloading; the virtual node stays, NotReady, as Liqo leaves it until it is removed."""
        await self.stop()
        self.set_ready(False, "The remote cluster is no longer peered")

    def set_ready(self, ready: bool, message: str | None = None) -> None:
        """Flip the virtual node's Ready condition (a donor outage or its recovery)."""
        self.ready = ready
        now = defaults.timestamp(self.origin.store.now())
        reason = "KubeletReady" if ready else "KubeletNotReady"
        message = message or ("The Liqo Virtual Kubelet is posting ready status" if ready else "The remote cluster is not reachable")

        def update(node: Obj) -> None:
            node["status"]["conditions"] = ready_conditions(ready, now, reason, message)

        self.origin.store.mutate("nodes", None, self.node_name, update)
        if ready:
            self._offload_waiting()

    # ---- the virtual kubelet's API: logs and exec of offloaded pods ----------------------------

    def _donor_pod(self, namespace: str, name: str) -> tuple[str, str]:
        remote_key = (self.remote_namespace(namespace), name)
        if remote_key not in self._remote:
            raise bad_request(f'pod "{name}" is not offloaded to cluster {self.cluster_id}')
        return remote_key

    def log_path(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None:
        """The donor pod's log, as Liqo's virtual kubelet serves pods/log by asking the donor."""
        try:
            remote_ns, remote_name = self._donor_pod(namespace, name)
        except ApiError:
            return None
        return self.donor.kubelet.log_path(remote_ns, remote_name, container, previous)

    async def open_exec(self, namespace: str, name: str, container: str | None, command: list[str], *, stdin: bool, tty: bool) -> Any:
        """A command in the donor pod's container, as the virtual kubelet forwards pods/exec."""
        remote_ns, remote_name = self._donor_pod(namespace, name)
        return await self.donor.kubelet.open_exec(remote_ns, remote_name, container, command, stdin=stdin, tty=tty)

    # ---- origin -> donor -----------------------------------------------------------------------

    def _offloading(self, namespace: str) -> Obj | None:
        """The namespace's NamespaceOffloading when it selects this donor."""
        try:
            nso = self.origin.store.get(NSOFF, namespace, liqo.NAMESPACE_OFFLOADING_NAME)
        except ApiError:
            return None
        if nso["metadata"].get("deletionTimestamp"):
            return None
        selector = (nso.get("spec") or {}).get("clusterSelector")
        if selector and selector.get("nodeSelectorTerms"):
            node = self.origin.store.get("nodes", None, self.node_name)
            if not selector_matches(selector, node["metadata"].get("labels") or {}, self.node_name):
                return None
        if (nso.get("spec") or {}).get("podOffloadingStrategy") == "Local":
            return None
        return nso

    def _ensure_remote_namespace(self, namespace: str) -> str:
        remote_ns = self.remote_namespace(namespace)
        try:
            self.donor.store.get("namespaces", None, remote_ns)
        except ApiError:
            self.donor.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": remote_ns}})
        return remote_ns

    def _offload(self, pod: Obj) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if not self.ready or self._offloading(ns) is None:
            return  # stays Pending; see the module docstring
        remote_ns = self._ensure_remote_namespace(ns)
        if (remote_ns, name) in self._remote:
            return
        self._remote[(remote_ns, name)] = (ns, name)
        self._reflect_secrets(pod)
        try:
            reflect_claims(pod, self.origin.store, self.donor.store, remote_ns, self.node_name)
            self.donor.store.create("pods", remote_pod(pod, remote_ns, self._twin_labels(pod)), remote_ns)
        except ApiError as exc:
            if exc.code != 409:
                del self._remote[(remote_ns, name)]
                log.warning("offloading %s/%s to %s failed: %s", ns, name, self.cluster_id, exc)
            return
        self._mark_offloaded(ns, name)

    def _twin_labels(self, pod: Obj) -> dict[str, str]:
        return twin_labels(pod, self.origin.cluster_id, self.cluster_id, self.node_name)

    def _mark_offloaded(self, namespace: str, name: str) -> None:
        """Liqo's label on the origin pod, once its twin exists."""

        def mark(obj: Obj) -> None:
            obj["metadata"].setdefault("labels", {})[liqo.OFFLOADED_POD_LABEL] = "true"

        try:
            self.origin.store.mutate("pods", namespace, name, mark)
        except ApiError:
            pass  # gone meanwhile: its deletion reaches the twin

    def _reflect_secrets(self, pod: Obj) -> None:
        """The pod's Secrets now, before the pod: the reflector's watch may not have got to them."""
        ns = pod["metadata"]["namespace"]
        for name in sorted(referenced_secrets(pod)):
            try:
                secret = self.origin.store.get("secrets", ns, name)
            except ApiError:
                continue  # the donor's kubelet reports it missing, as the origin's would
            self.reflector.reflect("secrets", secret)

    def _reflected_namespace(self, namespace: str) -> str | None:
        """The remote namespace of ``namespace`` while it is offloaded to this donor (made if need be)."""
        if not self.ready or self._offloading(namespace) is None:
            return None
        try:
            return self._ensure_remote_namespace(namespace)
        except ApiError:
            return None  # the remote namespace is terminating

    def _offload_waiting(self) -> None:
        pods, _ = self.origin.store.list("pods", field_selector=f"spec.nodeName={self.node_name}")
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                self._offload(pod)

    async def _origin_pods(self) -> None:
        # read-only: the twin is built from copies (remote_pod), never from the stored pod itself
        watch = self.origin.store.watch("pods", field_selector=f"spec.nodeName={self.node_name}", read_only=True)
        try:
            async for etype, pod in watch:
                ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
                remote_key = (self.remote_namespace(ns), name)
                tracked = remote_key in self._remote
                if etype == "DELETED":
                    if tracked:
                        self._delete_remote(remote_key, 0)
                elif pod["metadata"].get("deletionTimestamp"):
                    if tracked:
                        self._delete_remote(remote_key, pod["metadata"].get("deletionGracePeriodSeconds"))
                    else:
                        _remove(self.origin.store, ns, name)
                elif not tracked and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                    self._offload(pod)
                elif tracked:
                    self._reflect_metadata(remote_key, pod)
        finally:
            watch.close()

    def _reflect_metadata(self, remote_key: tuple[str, str], pod: Obj) -> None:
        """The origin pod's labels and annotations onto its donor twin, where they differ."""
        meta = pod["metadata"]
        labels, annotations = self._twin_labels(pod), dict(meta.get("annotations") or {})
        try:
            twin = self.donor.store.get("pods", *remote_key)
        except ApiError:
            return  # not created yet (it is created with them) or gone
        if (twin["metadata"].get("labels") or {}) == labels and (twin["metadata"].get("annotations") or {}) == annotations:
            return  # a status write, or nothing Liqo reflects
        # the pod's Secrets first, as when it was offloaded: an update often comes with a new one
        self._reflect_secrets(pod)

        def update(obj: Obj) -> None:
            obj["metadata"]["labels"], obj["metadata"]["annotations"] = labels, annotations

        try:
            self.donor.store.mutate("pods", *remote_key, update)
        except ApiError:
            pass  # gone meanwhile

    def _delete_remote(self, remote_key: tuple[str, str], grace: int | None) -> None:
        try:
            self.donor.store.delete("pods", *remote_key, grace_period_seconds=grace)
        except ApiError as exc:
            if exc.code in (429, 500, 502, 503, 504):
                # the donor is away: its twin still runs, and goes once the donor answers again
                # (removing the origin's pod now would leave the twin running with nobody's pod)
                self._tasks.append(asyncio.create_task(self._delete_remote_later(remote_key, grace)))
                return
            origin_key = self._remote.pop(remote_key, None)
            if origin_key:
                _remove(self.origin.store, *origin_key)

    async def _delete_remote_later(self, remote_key: tuple[str, str], grace: int | None) -> None:
        await asyncio.sleep(1.0)
        if remote_key in self._remote:
            self._delete_remote(remote_key, grace)

    async def _origin_offloadings(self) -> None:
        watch = self.origin.store.watch(NSOFF)
        try:
            async for etype, nso in watch:
                if etype == "DELETED" or nso["metadata"]["name"] != liqo.NAMESPACE_OFFLOADING_NAME:
                    continue
                ns = nso["metadata"]["namespace"]
                if (nso.get("status") or {}).get("remoteNamespaceName") or self._offloading(ns) is None:
                    continue
                remote_ns = self._ensure_remote_namespace(ns)

                def set_status(obj: Obj, remote_ns: str = remote_ns) -> None:
                    obj["status"] = {"offloadingPhase": "Ready", "remoteNamespaceName": remote_ns}

                try:
                    self.origin.store.mutate(NSOFF, ns, liqo.NAMESPACE_OFFLOADING_NAME, set_status)
                except ApiError:
                    continue
                self.reflector.reflect_namespace(ns)
                self._offload_waiting()
        finally:
            watch.close()

    # ---- donor -> origin -----------------------------------------------------------------------

    async def _donor_pods(self) -> None:
        watch = self.donor.store.watch("pods", read_only=True)  # statuses are copied onto the origin's pod
        try:
            async for etype, rpod in watch:
                key = (rpod["metadata"]["namespace"], rpod["metadata"]["name"])
                origin_key = self._remote.get(key)
                if origin_key is None:
                    continue
                if etype == "DELETED":
                    del self._remote[key]
                    _remove(self.origin.store, *origin_key)
                else:
                    self._reflect_status(origin_key, rpod)
        finally:
            watch.close()

    def _reflect_status(self, origin_key: tuple[str, str], rpod: Obj) -> None:
        rstatus = rpod.get("status") or {}

        def update(pod: Obj) -> None:
            status = pod.setdefault("status", {})
            for key in _REFLECTED_STATUS:
                if key == "phase" and rstatus.get("phase") == "Running" and not rstatus.get("podIP"):
                    continue  # never Running without its IP, as a kubelet reports it
                if key in rstatus:
                    status[key] = copy.deepcopy(rstatus[key])
            if rstatus.get("podIP"):
                status["hostIP"] = self.node_ip
                status["hostIPs"] = [{"ip": self.node_ip}]
            ours = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            status["conditions"] = ours + [copy.deepcopy(c) for c in rstatus.get("conditions") or [] if c.get("type") != "PodScheduled"]

        try:
            self.origin.store.mutate("pods", *origin_key, update)
        except ApiError:
            pass

    async def _donor_events(self) -> None:
        watch = self.donor.store.watch("events", read_only=True)
        try:
            async for etype, event in watch:
                if etype != "ADDED":
                    continue
                inv = event.get("involvedObject") or {}
                origin_key = self._remote.get((inv.get("namespace"), inv.get("name")))
                if origin_key is None or inv.get("kind") != "Pod":
                    continue
                try:
                    pod = self.origin.store.get("pods", *origin_key)
                except ApiError:
                    continue
                component = event.get("reportingComponent") or (event.get("source") or {}).get("component") or "kubelet"
                # as Liqo reflects it: the donor's component marked remote, the donor's own node
                host = (event.get("source") or {}).get("host") or event.get("reportingInstance") or None
                self.origin.store.record_event(
                    pod,
                    event["reason"],
                    event.get("message", ""),
                    type=event.get("type", "Normal"),
                    component=component,
                    scheduler_style=bool(event.get("eventTime")),
                    host=host,
                    field_path=inv.get("fieldPath"),
                    action=event.get("action"),
                    remote=True,
                )
        finally:
            watch.close()


def referenced_secrets(pod: Obj) -> set[str]:
    """Names of the Secrets a pod's containers and volumes use."""
    spec = pod.get("spec") or {}
    names = {((v.get("secret") or {}).get("secretName")) for v in spec.get("volumes") or []}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        names |= {((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") for e in container.get("env") or []}
        names |= {(f.get("secretRef") or {}).get("name") for f in container.get("envFrom") or []}
    return {n for n in names if n}


def _remove(store: Any, namespace: str, name: str) -> None:
    try:
        store.remove("pods", namespace, name)
    except ApiError:
        pass


def _say_if_it_died(task: asyncio.Task) -> None:
    """A peering task ends only when the peering stops; one that raised stopped offloading or
    reflecting for good, which nothing else would show."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("%s stopped: %r", task.get_name(), exc, exc_info=exc)
