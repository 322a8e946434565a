"""The federation as `gpuburst bench spawn` reads and resets it between phases: what the API
server answered, where each pod runs, what the pods and the processes cost, and the clearing that
makes every phase start from the same cluster. On the emulator and on the real control plane
alike (``Federation.control_plane``)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass

import psutil

from jupyter_gpuburst.bench import cpu_share
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.sim.federation import Federation

log = logging.getLogger(__name__)


def api_reads(fed: Federation) -> int:
    """List and get requests the origin's API server has answered so far; on the real control
    plane, the hub's, from the API server's audit log (its other clients are the node agents)."""
    if fed.control_plane == "kube":
        from jupyter_gpuburst.sim.kube import audit
        from jupyter_gpuburst.sim.kube.deployment import HUB_USER

        return sum(1 for event in audit.events([fed.origin.control_plane.audit_log], HUB_USER) if event["verb"] in ("get", "list"))
    stats = fed.origin.api.stats
    return int(stats.get("list", 0) + stats.get("get", 0))


def failed_scheduling(fed: Federation, pod_prefix: str) -> int:
    """FailedScheduling events the origin's API server holds about pods named ``pod_prefix*``.

    Read through the store's list, as ``kubectl get events`` would; a donor's FailedScheduling
    is reflected onto the origin pod by the peering, so it is counted here too.
    """
    events, _ = fed.origin.store.list("events")
    return sum(
        1
        for e in events
        if e.get("reason") == "FailedScheduling" and str((e.get("involvedObject") or {}).get("name", "")).startswith(pod_prefix)
    )


def offload_namespace(fed: Federation, namespace: str) -> None:
    """The NamespaceOffloading an admin creates so plain pods may run on virtual nodes."""
    rtype = f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}"
    if fed.origin.store.list(rtype, namespace)[0]:
        return
    fed.origin.store.create(rtype, liqo.namespace_offloading(namespace), namespace)


# this process: the users' requests, the node agents (the emulator too, where it is the control
# plane), and the pods' processes under it
BENCHMARK_ROLE = "benchmark and node agents"


def cpu_roles(fed: Federation, hub: HubProcess) -> dict[str, int | list[int]]:
    """The processes whose CPU time ``cpu_share`` reports apart: the hub, the real control
    plane's (every site's etcd, kube-apiserver, kube-controller-manager, kube-scheduler), and
    this process."""
    roles: dict[str, int | list[int]] = {"hub": hub.proc.pid if hub.proc else -1, BENCHMARK_ROLE: os.getpid()}
    if fed.control_plane == "kube":
        roles[cpu_share.CONTROL_PLANE] = [pid for site in fed.clusters.values() for pid in site.control_plane.pids()]
    return roles


def pod_rss_mib(fed: Federation) -> float:
    """Resident memory of every pod process (the stand-in servers), in MiB."""
    total = 0
    for cluster in fed.clusters.values():
        for pid in cluster.kubelet.processes().values():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
    return total / 2**20


@dataclass(frozen=True)
class ClearedPods:
    """How one clearing went: seconds it took, pods deleted, of them those listed only after the
    first pass (made after the phase had ended), and what was left at the timeout."""

    seconds: float
    pods: int
    late: int
    left: dict[str, int]  # what was still there at the timeout, by cluster: empty when clear


async def clear_pods(fed: Federation, timeout: float = 120.0, quiet: float = 2.0) -> ClearedPods:
    """Delete every pod, in every cluster, until none is listed and no container runs for
    ``quiet`` seconds in a row, or ``timeout`` has passed; say what was left, where.

    Like for like must be checked, not assumed: a phase that started while the last one's pods
    still held GPUs would be compared with one that did not, and nothing would say so. So the
    clearing, and what it left, is in the results, and `bench spawn`'s checks fail on it. A
    pod asked to go is asked once; one listed after the first pass (made after the phase ended,
    as a reflection catching up could) is deleted too and counted ``late``.
    """
    started = time.monotonic()
    asked: set[tuple[str, str]] = set()
    late = 0  # pods first listed after the first pass
    first_pass = True
    clear_since: float | None = None
    while True:
        left: dict[str, int] = {}
        running_pods: list[str] = []  # named in the warning: what to look for in the kubelet's log
        new = 0
        for name, cluster in fed.clusters.items():
            pods = cluster.store.list("pods")[0]
            if pods:
                left[f"{name} pods"] = len(pods)
            for pod in pods:
                uid = (name, pod["metadata"].get("uid", ""))
                if uid in asked:
                    continue
                asked.add(uid)
                new += 1
                try:
                    cluster.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period_seconds=0)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            running = cluster.kubelet.processes()
            if running:
                left[f"{name} containers"] = len(running)
                running_pods += [f"{name}:{namespace}/{pod}" for namespace, pod in running]
        if not first_pass:
            late += new
        first_pass = False
        now = time.monotonic()
        if left:
            clear_since = None
        elif clear_since is None:
            clear_since = now
        elif now - clear_since >= quiet:
            break
        if now - started >= timeout:
            log.warning("%g s after the phase its pods were deleted, still left: %s (containers of %s)", timeout, left, running_pods)
            break
        await asyncio.sleep(0.2)
    clear_events(fed)
    seconds = time.monotonic() - started - (0 if left else quiet)
    return ClearedPods(seconds=round(seconds, 2), pods=len(asked), late=late, left=left)


def clear_events(fed: Federation) -> None:
    """Delete the events the phase left, so that every phase starts from the same cluster.

    Events stay on an API server for an hour, and each phase adds about six per spawn. Every
    hub lists them and KubeSpawner sorts them all twice per spawn (``KubeSpawner.events``): left
    in place, each phase would pay for every earlier phase's events, and in A B A B order each B
    for one phase more than the A it is compared with.
    """
    for cluster in fed.clusters.values():
        for event in cluster.store.list("events")[0]:
            meta = event["metadata"]
            try:
                cluster.store.delete("events", meta.get("namespace"), meta["name"])
            except Exception:  # noqa: BLE001 - already gone
                pass


def pod_states(fed: Federation) -> dict[str, int]:
    """How many pods are in each (cluster, phase, ready) state: what a failed run leaves behind."""
    states: dict[str, int] = {}
    for name, cluster in fed.clusters.items():
        for pod in cluster.store.list("pods")[0]:
            status = pod.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            key = f"{name}:{status.get('phase')}:{'ready' if ready else 'not-ready'}"
            states[key] = states.get(key, 0) + 1
    return states


def pod_sites(fed: Federation, pod_prefix: str) -> dict[str, str]:
    """Where each of the phase's pods runs, by pod name: the origin, or the donor whose virtual
    node it is bound to."""
    nodes = {n["metadata"]["name"]: n for n in fed.origin.store.list("nodes")[0]}
    sites: dict[str, str] = {}
    for pod in fed.origin.store.list("pods")[0]:
        name = pod["metadata"]["name"]
        if not name.startswith(pod_prefix):
            continue
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        sites[name] = "unbound" if node is None else liqo.remote_cluster_id(node) or keys.ORIGIN_SITE
    return sites
