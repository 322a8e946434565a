"""The process kubelet: runs the pods bound to one cluster's non-virtual nodes as local processes.

Per pod, as the kubelet does: volumes are set up (``volumes``), init containers run one after
the other to completion, then every container runs; an exit is restarted per ``restartPolicy``
with the kubelet's back-off (immediately, then 10 s doubling up to 5 min, reported as
CrashLoopBackOff); startup, liveness and readiness probes (``probes``) drive ``started``,
restarts and ``ready``; deletion sends SIGTERM to each container's process group and SIGKILL
after the grace period. The pod's hostname is its name: the process gets its own UTS namespace
where this kubelet may create one (root), with the pod's managed hosts file (its name -> pod IP,
``hostAliases``, Service names) bound over /etc/hosts in a mount namespace of its own, where its
volumes are bound at their mountPath too (``mounts``); else only ``HOSTNAME`` and, for Python
programs, a ``sitecustomize`` that makes ``socket.gethostname()`` answer it, and volume paths
are mapped (``volumes.PathMap``). Pods share the host's network, each with a loopback address
of its own, unless asked to have a network namespace each (``netns``). exec, exec probes and
exec hooks enter the container's namespaces (``nsenter``).

The worker is split by job: ``containers`` (a container's runs and restart back-off),
``lifecycle`` (its hooks, probes and stop), ``processes`` (its processes on the host) and
``hostsfile``; here are the pod's own: admission, sandbox, status writes and deletion.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import ApiError, bad_request
from jupyter_gpuburst.sim.kubelet import images, mounts, netns, processes, servicenames, status, volumes
from jupyter_gpuburst.sim.kubelet.containers import BACKOFF_INITIAL_S, ContainerRunner
from jupyter_gpuburst.sim.kubelet.devices import AdmissionError, DevicePlugin
from jupyter_gpuburst.sim.kubelet.hostsfile import write_hosts_file
from jupyter_gpuburst.sim.kubelet.lifecycle import ContainerLifecycle
from jupyter_gpuburst.sim.kubelet.network import AddressPool, container_ports
from jupyter_gpuburst.sim.kubelet.status import ContainerRun, PodRun
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# The kubelet's --sync-frequency (default 1m): it syncs every running pod this often, besides on
# each update to the pod, and a Secret or ConfigMap volume then follows its source. A Secret that
# reaches the node's cache after the pod's update (Liqo reflects the two apart, and on the real
# control plane each through its own watch) is in the pod's files by the next sync, not never.
SYNC_FREQUENCY_S = 60.0
# The kubelet's housekeeping period (2 s): each time, a pod it runs that the API no longer has
# (HandlePodCleanups' "orphaned" pods) is killed, so a deletion it did not see cannot leave
# containers running for good.
HOUSEKEEPING_S = 2.0


class Kubelet(ContainerRunner, ContainerLifecycle):
    """Runs every pod bound to a non-virtual node of this cluster."""

    def __init__(
        self,
        store: Store,
        pool: AddressPool,
        *,
        state_dir: Path,
        stop_grace_s: float = 2.0,
        backoff_initial_s: float = BACKOFF_INITIAL_S,
        image_settings: images.ImageSettings | None = None,
        devices: DevicePlugin | None = None,
        sync_frequency_s: float = SYNC_FREQUENCY_S,
    ):
        self.store = store
        self.sync_frequency_s = sync_frequency_s
        self.devices = devices or DevicePlugin()
        self.images = images.ImageCache(store, image_settings)
        self.stop_grace_s = stop_grace_s
        self.pool = pool
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.backoff_initial_s = backoff_initial_s
        self._pods: dict[tuple[str, str], PodRun] = {}
        self._finished: dict[tuple[str, str], PodRun] = {}  # logs stay readable after the pod is gone
        self._task: asyncio.Task | None = None
        self._virtual_nodes: set[str] = set()
        self._services: set[tuple[str, str]] = set()
        self._service_table: list[tuple[str, str, str]] = []
        self._services_task: asyncio.Task | None = None
        self._slices_task: asyncio.Task | None = None
        self._sync_task: asyncio.Task | None = None
        self._housekeeping_task: asyncio.Task | None = None
        self._hosts_refresh: asyncio.TimerHandle | None = None
        self.pod_networks = netns.requested()

    # ---- what the API server and tests read ---------------------------------------------------

    def log_path(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> Path | None:
        """The log file of a container (the first regular one by default); None when it has none."""
        pr = self._pods.get((namespace, name)) or self._finished.get((namespace, name))
        if pr is None:
            return None
        c = pr.container(container)
        if c is None or (previous and c.restart_count == 0):
            return None
        path = c.log_path(previous)
        return path if path.exists() else None

    def processes(self) -> dict[tuple[str, str], int]:
        """Live process ids (the first regular container's) by (namespace, pod name)."""
        out = {}
        for key, pr in self._pods.items():
            for c in pr.main:
                if c.process is not None and c.process.returncode is None:
                    out[key] = c.process.pid
                    break
        return out

    async def open_exec(
        self, namespace: str, name: str, container: str | None, command: list[str], *, stdin: bool, tty: bool
    ) -> tuple[asyncio.subprocess.Process, int | None]:
        """Start ``command`` in a running container: (process, pty master fd when ``tty``)."""
        pr = self._pods.get((namespace, name))
        if pr is None:
            raise bad_request(f'pod "{name}" is not running on a node of this cluster\'s kubelet')
        c = pr.container(container)
        if c is None:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if c.process is None or c.process.returncode is not None:
            raise bad_request(f'unable to upgrade connection: container not found ("{c.name}")')
        if not command:
            raise bad_request("you must specify at least 1 command")
        return await self._spawn_in(pr, c, command, stdin=stdin, tty=tty)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.pod_networks and (why := netns.unavailable()):
            raise RuntimeError(f"{netns.MODE_ENV}=namespaces: {why}")
        for node in self.store.iter_objects("nodes"):
            if not liqo.is_virtual_node(node):
                self.images.preload(node["metadata"]["name"])
        self._task = asyncio.create_task(self._run(), name="kubelet")
        self._sync_task = asyncio.create_task(self._sync_periodically(), name="kubelet-sync")
        self._housekeeping_task = asyncio.create_task(self._housekeeping(), name="kubelet-housekeeping")
        if processes.uts_namespaces():  # service names live in the pods' own /etc/hosts
            self._services_task = asyncio.create_task(self._watch_services(), name="kubelet-services")
            self._slices_task = asyncio.create_task(self._watch_slices(), name="kubelet-endpointslices")

    async def stop(self) -> None:
        if self._hosts_refresh is not None:
            self._hosts_refresh.cancel()
        for task in (self._task, self._sync_task, self._housekeeping_task, self._services_task, self._slices_task):
            if task:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for pr in self._pods.values():
            pr.killing = True
        await asyncio.gather(*(self._kill_pod(pr, self.stop_grace_s) for pr in list(self._pods.values())), return_exceptions=True)
        for pr in self._pods.values():
            for t in pr.tasks:
                t.cancel()
        await asyncio.gather(*(self._close_network(pr) for pr in self._pods.values()), return_exceptions=True)
        self._pods.clear()

    # ---- service names ---------------------------------------------------------------------------

    async def _watch_services(self) -> None:
        watch = self.store.watch("services")
        try:
            async for etype, svc in watch:
                key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
                if etype == "DELETED":
                    self._services.discard(key)
                else:
                    self._services.add(key)
                self._refresh_hosts_soon()
        finally:
            watch.close()

    async def _watch_slices(self) -> None:
        """A selector-less Service's address is in its EndpointSlices, kept by whoever made it."""
        watch = self.store.watch(servicenames.ENDPOINTSLICES)
        try:
            async for _etype, _eps in watch:
                self._refresh_hosts_soon()
        finally:
            watch.close()

    def _refresh_hosts_soon(self) -> None:
        """Rewrite the running pods' hosts files once a burst of events is over."""
        if self._hosts_refresh is None:
            self._hosts_refresh = asyncio.get_running_loop().call_later(0.05, self._refresh_hosts)

    def _refresh_hosts(self) -> None:
        self._hosts_refresh = None
        table = servicenames.addresses(self.store)
        if table == self._service_table:
            return
        self._service_table = table
        for pr in list(self._pods.values()):
            if pr.hosts_file is not None:
                self._write_hosts(pr)

    def _write_hosts(self, pr: PodRun) -> Path:
        spec = pr.pod["spec"]
        ns = pr.key[0]
        return write_hosts_file(
            pr.dir / "etc-hosts",
            pr.ip,
            pr.hostname,
            spec.get("subdomain"),
            ns,
            spec.get("hostAliases") or [],
            servicenames.hosts_lines(self._service_table, ns),
        )

    def _is_ours(self, node_name: str) -> bool:
        if node_name in self._virtual_nodes:
            return False
        try:
            node = self.store.get("nodes", None, node_name)
        except ApiError:
            return False
        if liqo.is_virtual_node(node):
            self._virtual_nodes.add(node_name)
            return False
        return True

    async def _run(self) -> None:
        watch = self.store.watch("pods")
        try:
            async for etype, pod in watch:
                try:
                    self._on_pod_event(etype, pod)
                except Exception:  # one pod's failed sync must not leave the node deaf to the rest
                    log.exception("sync of pod %s/%s failed", pod["metadata"].get("namespace"), pod["metadata"].get("name"))
        finally:
            watch.close()

    def _on_pod_event(self, etype: str, pod: Obj) -> None:
        if self._services:
            self._refresh_hosts_soon()  # a Service's pod may have come, gone or turned ready
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not self._is_ours(node):
            return
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        pr = self._pods.get(key)
        if pr is not None and pr.uid != pod["metadata"]["uid"]:
            return  # an event of another pod of the same name: _start_successor's once pr is gone
        if etype == "DELETED":
            if pr and not pr.killing:
                self._kill(pr, 0, remove=False)
            return
        if pr is None and not pod["metadata"].get("deletionTimestamp"):
            if (pod.get("status") or {}).get("phase", "Pending") == "Pending" and not (pod.get("status") or {}).get("podIP"):
                self._start_pod(key, pod)
        elif not pod["metadata"].get("deletionTimestamp") and _synced_metadata(pod) != _synced_metadata(pr.pod):
            # an update to the pod (not the kubelet's own status write) syncs it: its
            # Secret and ConfigMap volumes follow their sources, as the kubelet's do
            pr.pod = pod
            if pr.volumes:
                volumes.refresh(self.store, pod, pr.volumes)
        elif pod["metadata"].get("deletionTimestamp"):
            if pr is None:
                self._remove(key, pod["metadata"]["uid"])
            elif not pr.killing:
                self._kill(pr, int(pod["metadata"].get("deletionGracePeriodSeconds", 30)), remove=True)

    def _kill(self, pr: PodRun, grace: float, *, remove: bool) -> None:
        pr.killing = True
        pr.tasks.append(asyncio.create_task(self._finish(pr, grace, remove=remove)))

    async def _housekeeping(self) -> None:
        missing_before: set[str] = set()
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            missing = set()
            known = {pod["metadata"]["uid"] for pod in self.store.iter_objects("pods")}  # read, not copied
            for pr in [pr for pr in self._pods.values() if not pr.killing]:
                if pr.uid in known:
                    continue
                missing.add(pr.uid)
                # gone on two passes in a row: not a deletion whose event is still on its way
                if pr.uid in missing_before:
                    log.warning("pod %s/%s (uid %s) runs here but is gone from the API: killing it", *pr.key, pr.uid)
                    self._kill(pr, 0, remove=False)
            missing_before = missing

    async def _sync_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.sync_frequency_s)
            for pr in list(self._pods.values()):
                if pr.volumes and not pr.killing:
                    try:
                        volumes.refresh(self.store, pr.pod, pr.volumes)
                    except OSError as exc:  # its directory going with the pod: the next sync skips it
                        log.debug("periodic sync of pod %s/%s: %s", *pr.key, exc)

    def _event(self, pr: PodRun, reason: str, message: str, *, container: ContainerRun | None = None, warning: bool = False) -> None:
        """Record an event; a refused one (namespace terminating, pod gone) is dropped, as the
        kubelet's event recorder drops what the server rejects."""
        field_path = None
        if container is not None:
            field_path = f"spec.{'initContainers' if container.init else 'containers'}{{{container.name}}}"
        try:
            self.store.record_event(
                pr.pod, reason, message, type="Warning" if warning else "Normal", host=pr.pod["spec"]["nodeName"], field_path=field_path
            )
        except ApiError as err:
            log.debug("event %s for %s/%s dropped: %s", reason, *pr.key, err.message)

    def _remove(self, key: tuple[str, str], uid: str) -> None:
        try:
            current = self.store.get("pods", *key)
        except ApiError:
            return
        if current["metadata"]["uid"] == uid:
            self.store.remove("pods", *key)

    def _start_pod(self, key: tuple[str, str], pod: Obj) -> None:
        spec = pod["spec"]
        ports = [p for c in spec["containers"] for p in container_ports(c)]
        ip = self.pool.allocate(ports)
        pod_dir = self.state_dir / f"{key[0]}_{key[1]}_{pod['metadata']['uid'][:8]}"
        pod_dir.mkdir(parents=True, exist_ok=True)

        def run(c: Obj, init: bool) -> ContainerRun:
            cr = ContainerRun(c, init, pod_dir)
            cr.log_path().touch()
            if init or spec.get("initContainers"):
                cr.state = {"waiting": {"reason": "PodInitializing"}}
            return cr

        pr = PodRun(
            key,
            pod["metadata"]["uid"],
            ip,
            pod_dir,
            pod,
            [run(c, True) for c in spec.get("initContainers") or []],
            [run(c, False) for c in spec["containers"]],
            hostname=spec.get("hostname") or pod["metadata"]["name"],
        )
        self._pods[key] = pr
        pr.tasks.append(asyncio.create_task(self._run_pod(pr), name=f"pod-{key[1]}"))

    def _host_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", None, node_name)
        for addr in (node.get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return addr["address"]
        return "127.0.0.1"

    # ---- status ---------------------------------------------------------------------------------

    def _publish(self, pr: PodRun) -> None:
        """Write the pod's status from what the kubelet knows now (one MODIFIED at most)."""
        if pr.killing and not pr.sandbox:
            return
        policy = pr.pod["spec"].get("restartPolicy", "Always")
        phase = status.pod_phase(policy, pr.init, pr.main)
        if phase == "Running" and not pr.sandbox:
            phase = "Pending"  # the kubelet has set podIP before any container runs
        stamp = defaults.timestamp(self.store.now())

        def update(p: Obj) -> None:
            if p["metadata"]["uid"] != pr.uid:
                return  # a newer pod of the same name: not ours to write
            st = p.setdefault("status", {})
            st["phase"] = phase
            st["conditions"] = status.conditions(st.get("conditions") or [], phase, pr.init, pr.main, pr.sandbox, stamp)
            if pr.init:
                st["initContainerStatuses"] = [c.status(pr.uid) for c in pr.init]
            st["containerStatuses"] = [c.status(pr.uid) for c in pr.main]

        try:
            pr.pod = self.store.mutate("pods", *pr.key, update)
        except ApiError:
            pass  # removed meanwhile

    # ---- running a pod --------------------------------------------------------------------------

    async def _run_pod(self, pr: PodRun) -> None:
        ns, name = pr.key
        node = pr.pod["spec"]["nodeName"]
        if not self._admit(pr, node):
            return
        while True:
            try:
                pr.volumes = volumes.materialize(self.store, pr.pod, pr.dir, self.state_dir)
                break
            except volumes.VolumeError as exc:
                self._event(pr, "FailedMount", f"MountVolume.SetUp failed for volume: {exc}", warning=True)
                self._publish(pr)
                for _ in range(20):  # the kubelet retries mounts; stop soon when deleted
                    if pr.killing:
                        return
                    await asyncio.sleep(0.1)
        if pr.killing:
            return
        host_ip = self._host_ip(node)
        if self.pod_networks and not pr.pod["spec"].get("hostNetwork"):
            pr.network = await self._create_network(pr, host_ip)
            if pr.network is None:
                return
        started = defaults.timestamp(self.store.now())

        def sandbox(p: Obj) -> None:
            if p["metadata"]["uid"] != pr.uid:
                raise ApiError(409, "Conflict", "a newer pod of the same name")
            st = p.setdefault("status", {})
            st.update({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pr.ip, "podIPs": [{"ip": pr.ip}], "startTime": started})

        try:
            pr.pod = self.store.mutate("pods", ns, name, sandbox)
        except ApiError:
            return
        pr.sandbox = True
        pr.real_mounts = processes.uts_namespaces() and mounts.real_mounts(self.state_dir)
        pr.hosts_file = self._write_hosts(pr)
        if pr.init:
            self._publish(pr)  # Initialized=False until they are done
        policy = pr.pod["spec"].get("restartPolicy", "Always")
        for c in pr.init:
            while not pr.killing:
                code = await self._run_once(pr, c)
                if code == 0 or pr.killing:
                    break
                if policy == "Never":
                    self._publish(pr)
                    return
                await self._back_off(pr, c)
            if pr.killing:
                return
        for c in pr.main:
            if not c.ran:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        await asyncio.gather(*(self._container_loop(pr, c, policy) for c in pr.main))
        if not pr.killing:
            self.devices.release(pr.uid)  # every container has ended for good: the pod is done

    def _admit(self, pr: PodRun, node: str) -> bool:
        """The devices the pod asks for, before anything of it runs; where the node has too few
        free, the pod fails as the kubelet fails it (UnexpectedAdmissionError)."""
        try:
            self.devices.allocate(node, pr.pod)
            return True
        except AdmissionError as exc:
            why = str(exc)
        log.warning("pod %s/%s not admitted: %s", *pr.key, why)

        def failed(p: Obj) -> None:
            if p["metadata"]["uid"] == pr.uid:
                p.setdefault("status", {}).update({"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": why})

        self._event(pr, "UnexpectedAdmissionError", why, warning=True)
        try:
            pr.pod = self.store.mutate("pods", *pr.key, failed)
        except ApiError:
            pass
        return False

    async def _create_network(self, pr: PodRun, node_ip: str) -> netns.PodNetwork | None:
        """The pod's network namespace, retried as the kubelet retries a sandbox; None once the
        pod is being deleted."""
        while not pr.killing:
            try:
                return await netns.PodNetwork.create(pr.uid, pr.ip, node_ip)
            except (OSError, netns.NetworkError) as exc:
                log.warning("pod %s/%s: no network namespace: %s", *pr.key, exc)
                self._event(pr, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}", warning=True)
                self._publish(pr)
                try:
                    await asyncio.wait_for(pr.killed.wait(), 2.0)
                except TimeoutError:
                    pass
        return None

    async def _close_network(self, pr: PodRun) -> None:
        network, pr.network = pr.network, None
        if network is not None:
            await network.close()

    # ---- stopping -------------------------------------------------------------------------------

    async def _finish(self, pr: PodRun, grace: float, *, remove: bool) -> None:
        """Graceful deletion: Killing events, SIGTERM, SIGKILL after ``grace``, then the pod goes."""
        pr.killed.set()
        for c in pr.all():
            if c.process is not None and c.process.returncode is None:
                self._event(pr, "Killing", f"Stopping container {c.name}", container=c)
        try:
            await self._kill_pod(pr, grace)
        finally:
            for t in pr.tasks:
                if t is not asyncio.current_task():
                    t.cancel()
            await self._close_network(pr)  # before its IP is handed out again
            self._forget(pr)
            if remove:
                self._remove(pr.key, pr.uid)
            self._start_successor(pr)

    def _start_successor(self, pr: PodRun) -> None:
        """Start a pod of the same name created while ``pr`` was stopping: its events came while
        the name was still taken here, and no other event may come for it (the kubelet keys pods
        by uid, so it would have started it already)."""
        if self._task is None or self._task.done():
            return  # stopping
        try:
            pod = self.store.get("pods", *pr.key)
        except ApiError:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if pr.key in self._pods or pod["metadata"]["uid"] == pr.uid or not node or not self._is_ours(node):
            return
        if pod["metadata"].get("deletionTimestamp"):
            self._remove(pr.key, pod["metadata"]["uid"])  # deleted before it ever ran: nothing to wait for
        elif not (pod.get("status") or {}).get("podIP"):
            self._start_pod(pr.key, pod)

    async def _kill_pod(self, pr: PodRun, grace: float) -> None:
        pr.killed.set()
        await asyncio.gather(*(self._stop_container(pr, c, grace) for c in pr.all() if c.process is not None), return_exceptions=True)

    def _forget(self, pr: PodRun) -> None:
        self.devices.release(pr.uid)
        if self._pods.get(pr.key) is pr:
            del self._pods[pr.key]
            self._finished[pr.key] = pr
            self.pool.release(pr.ip)


def _synced_metadata(pod: Obj) -> tuple[Any, ...]:
    """What of a pod's metadata makes the kubelet sync it when it changes (its status does not)."""
    meta = pod["metadata"]
    return (meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences"), pod.get("spec"))
