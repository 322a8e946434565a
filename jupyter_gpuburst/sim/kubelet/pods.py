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

Longer than 600 lines: a pod worker's life (start, restart with back-off, probes, stop) is one
state machine over one pod's state; everything it uses without that state lives in its sibling
modules (volumes, mounts, probes, status, runtime, network).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import psutil

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import ApiError, bad_request
from jupyter_gpuburst.sim.kubelet import hooks, images, mounts, netns, probes, runtime, servicenames, status, volumes
from jupyter_gpuburst.sim.kubelet.devices import AdmissionError, DevicePlugin
from jupyter_gpuburst.sim.kubelet.network import AddressPool, container_ports
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
ContainerRun = status.ContainerRun
UNSHARE = mounts.UNSHARE
NSENTER = netns.NSENTER
# kubelet's container restart back-off: 10 s doubling to 5 min; reset after 10 min of running.
BACKOFF_INITIAL_S = 10.0
BACKOFF_MAX_S = 300.0
IMAGE_RETRY_S = 10.0  # a container that may not pull is tried again on the kubelet's next sync
MIN_GRACE_AFTER_HOOK_S = 2.0  # kubelet's minimumGracePeriodInSeconds: SIGTERM always gets this long
_HOSTNAME_HOOK = '''"""Written by the emulated kubelet: the pod's hostname for Python programs (no UTS namespace)."""
import os as _os
import socket as _socket

_name = _os.environ.get("HOSTNAME")
if _name:
    _socket.gethostname = lambda: _name
'''


def go_duration(seconds: float) -> str:
    """A duration as Go prints one: 500ms, 10s, 2m40s, 5m0s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


@cache
def uts_namespaces() -> bool:
    """Whether this kubelet may start a container in namespaces of its own (root, util-linux)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux") or not shutil.which("mount") or not os.access(UNSHARE, os.X_OK):
        return False
    try:
        probe = subprocess.run(enter_pod_argv(["hostname"], "gpuburst-probe", None, ""), timeout=10, capture_output=True, text=True)
        return probe.returncode == 0 and probe.stdout.strip() == "gpuburst-probe"
    except (OSError, subprocess.SubprocessError):
        return False


# Run in the child by util-linux ``unshare`` (new UTS and mount namespaces): name the host (a
# shell builtin write, one exec less than ``hostname``), mount what the container's fstab lists
# (``mounts.plan``: volumes at their mountPath, the pod's hosts file at /etc/hosts) in one
# ``mount --all``, go to the working directory, and exec the container's command (same pid
# throughout). A preexec_fn would do the same without two execs, but forces a fork of this whole
# process instead of a vfork, which blocks the event loop (100+ ms per container under gVisor).
# A failed mount ends the start with 128, StartError's exit code.
_ENTER_POD_SCRIPT = 'echo "$0" > /proc/sys/kernel/hostname; [ -z "$1" ] || mount --all --fstab "$1" || exit 128; [ -z "$2" ] || cd "$2" || exit 128; unset OLDPWD; shift 2; exec "$@"'


def enter_pod_argv(argv: list[str], hostname: str, fstab: Path | None, workdir: str) -> list[str]:
    """``argv`` wrapped to start in the pod's own UTS and mount namespaces, with what ``fstab``
    lists mounted, in ``workdir`` (a path in the new namespace; empty: where it was started)."""
    return [UNSHARE, "--uts", "--mount", "--", "/bin/sh", "-c", _ENTER_POD_SCRIPT, hostname, str(fstab or ""), workdir, *argv]


def enter_container_argv(pid: int, argv: list[str], workdir: str, *, network: bool = False) -> list[str]:
    """``argv`` to run in the namespaces of the container whose process is ``pid`` (exec, probes,
    hooks); in its network namespace too where the pod has one."""
    return [NSENTER, "--target", str(pid), "--uts", "--mount", *(["--net"] if network else []), f"--wdns={workdir}", "--", *argv]


async def _entered(pid: int, timeout: float = 2.0) -> None:
    """Wait until the container ``pid`` has done its mounts and exec'd its program, so that what
    enters its namespaces sees them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 3)
        except OSError:
            return
        if argv0[0] not in (UNSHARE.encode(), NSENTER.encode()) and argv0[2:3] != [_ENTER_POD_SCRIPT.encode()]:
            return
        await asyncio.sleep(0.005)


@cache
def _host_entries() -> str:
    try:
        return Path("/etc/hosts").read_text()
    except OSError:
        return "127.0.0.1\tlocalhost\n"


def write_hosts_file(
    path: Path,
    pod_ip: str,
    hostname: str,
    subdomain: str | None,
    namespace: str,
    aliases: list[Obj],
    services: tuple[str, ...] | list[str] = (),
) -> Path:
    """The kubelet's managed hosts file: the host's entries, then the pod's own name and
    ``hostAliases`` (the host's are kept: here the pod shares the host's network), then the
    Services' names (``servicenames``). Rewritten in place, so a bind of it sees each update."""
    base = _host_entries()
    names = [hostname] if not subdomain else [f"{hostname}.{subdomain}.{namespace}.svc.cluster.local", hostname]
    lines = ["# Kubernetes-managed hosts file (emulated kubelet).", base.rstrip("\n"), f"{pod_ip}\t{' '.join(names)}"]
    for alias in aliases or []:
        lines.append(f"{alias.get('ip')}\t{' '.join(alias.get('hostnames') or [])}")
    lines.extend(services)
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class PodRun:
    key: tuple[str, str]
    uid: str
    ip: str
    dir: Path
    pod: Obj
    init: list[ContainerRun]
    main: list[ContainerRun]
    hostname: str
    volumes: dict[str, Path] = field(default_factory=dict)
    hosts_file: Path | None = None
    real_mounts: bool = False  # volumes bound at their mountPath (mounts.real_mounts), else mapped
    network: netns.PodNetwork | None = None  # a network namespace of its own, else the host's
    tasks: list[asyncio.Task] = field(default_factory=list)
    killing: bool = False
    sandbox: bool = False  # the pod IP is assigned and published
    killed: asyncio.Event = field(default_factory=asyncio.Event)

    def all(self) -> list[ContainerRun]:
        return [*self.init, *self.main]

    def container(self, name: str | None) -> ContainerRun | None:
        for c in self.all():
            if name is None and not c.init:
                return c
            if c.name == name:
                return c
        return None


class Kubelet:
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
    ):
        self.store = store
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
        if uts_namespaces():  # service names live in the pods' own /etc/hosts
            self._services_task = asyncio.create_task(self._watch_services(), name="kubelet-services")

    async def stop(self) -> None:
        if self._hosts_refresh is not None:
            self._hosts_refresh.cancel()
        for task in (self._task, self._services_task):
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
                if self._services:
                    self._refresh_hosts_soon()  # a Service's pod may have come, gone or turned ready
                node = (pod.get("spec") or {}).get("nodeName")
                if not node or not self._is_ours(node):
                    continue
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                pr = self._pods.get(key)
                if pr is not None and pr.uid != pod["metadata"]["uid"]:
                    continue  # an event of an older pod of the same name
                if etype == "DELETED":
                    if pr and not pr.killing:
                        pr.killing = True
                        pr.tasks.append(asyncio.create_task(self._finish(pr, 0, remove=False)))
                    continue
                if pr is None and not pod["metadata"].get("deletionTimestamp"):
                    if (pod.get("status") or {}).get("phase", "Pending") == "Pending" and not (pod.get("status") or {}).get("podIP"):
                        self._start_pod(key, pod)
                elif pod["metadata"].get("deletionTimestamp"):
                    if pr is None:
                        self._remove(key, pod["metadata"]["uid"])
                    elif not pr.killing:
                        pr.killing = True
                        grace = int(pod["metadata"].get("deletionGracePeriodSeconds", 30))
                        pr.tasks.append(asyncio.create_task(self._finish(pr, grace, remove=True)))
        finally:
            watch.close()

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
        pr.real_mounts = uts_namespaces() and mounts.real_mounts(self.state_dir)
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

    async def _container_loop(self, pr: PodRun, c: ContainerRun, policy: str) -> None:
        while not pr.killing:
            ran_from = time.monotonic()
            code = await self._run_once(pr, c)
            if pr.killing:
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                return
            if time.monotonic() - ran_from > 2 * BACKOFF_MAX_S:
                c.backoff = 0.0  # ran long enough: the kubelet forgets the back-off
            await self._back_off(pr, c)

    async def _back_off(self, pr: PodRun, c: ContainerRun) -> None:
        """Wait before restarting ``c``: not at all the first time, then 10 s doubling to 5 min."""
        delay = c.backoff
        c.backoff = min(BACKOFF_MAX_S, delay * 2 if delay else self.backoff_initial_s)
        c.last_state = {"terminated": c.state.get("terminated", {})}
        if delay:
            podref = f"{pr.key[1]}_{pr.key[0]}({pr.uid})"
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {go_duration(delay)} restarting failed container={c.name} pod={podref}",
                }
            }
            c.ready = False
            self._event(pr, "BackOff", f"Back-off restarting failed container {c.name} in pod {podref}", container=c, warning=True)
            self._publish(pr)
            try:
                await asyncio.wait_for(pr.killed.wait(), delay)
            except TimeoutError:
                pass
        c.restart_count += 1

    def _container_env(self, pr: PodRun, c: ContainerRun, view: volumes.PathMap) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of the container's process (paths mapped
        where the view does not mount them)."""
        spec = c.spec
        # 0.0.0.0 is the pod's own only in a network namespace of its own
        replace_ip = pr.ip if pr.network is None else None
        argv = [view.rewrite(a.replace("0.0.0.0", replace_ip) if replace_ip else a) for a in runtime.container_argv(spec)]
        if not argv:
            raise FileNotFoundError(f'no command given and image "{spec.get("image", "")}" has no emulated entrypoint')
        given = runtime.pod_env(pr.pod, spec, self.store, replace_ip)
        env = {k: view.rewrite(v) for k, v in given.items()}
        env.update(self.devices.env(pr.uid, c.name, env))  # the device plugin's say over the image's
        home = str(view.directory(_home_path(spec, given), private=True))
        env.setdefault("HOME", home)
        working_dir = (spec.get("workingDir") or "").rstrip("/") or ("/" if spec.get("workingDir") else "")
        workdir = str(view.directory(working_dir)) if working_dir else home
        env.setdefault("PATH", os.pathsep.join([*runtime.image_path(), os.environ.get("PATH", "")]))
        env.setdefault("HOSTNAME", pr.hostname)
        if not uts_namespaces():
            hook = pr.dir / "hostname-hook"
            hook.mkdir(exist_ok=True)
            (hook / "sitecustomize.py").write_text(_HOSTNAME_HOOK)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
        if os.geteuid() == 0 and runtime.run_as_user(pr.pod, spec) != 0:
            runtime._pretend_unprivileged(pr.dir, env)
        # a container's temporary files are its own, in its pod's directory, not in the host's /tmp
        env.setdefault("TMPDIR", str(view.directory("/tmp", private=True)))
        exe = runtime.resolve_command(argv[0], env.get("PATH"))
        if exe is None:
            raise FileNotFoundError(f'exec: "{argv[0]}": executable file not found in $PATH')
        return [exe, *argv[1:]], env, workdir

    def _view(self, pr: PodRun, c: ContainerRun) -> volumes.PathMap:
        """The container's filesystem view: volumes bound in a mount namespace of its own where
        this kubelet may, else mapped by path rewriting (with only the hosts file bound, as root)."""
        spec = c.spec
        if pr.real_mounts:
            home = _home_path(spec, runtime.pod_env(pr.pod, spec, self.store, pr.ip))
            return volumes.namespace_view(
                pr.dir,
                spec,
                pr.volumes,
                home=home,
                hosts_file=pr.hosts_file,
                instance=c.restart_count,
                keep_visible=[self.state_dir],
                keep_home_off=[self.state_dir, Path(sys.prefix), Path(sys.base_prefix)],
            )
        view = volumes.container_view(pr.dir, spec, pr.volumes)
        if uts_namespaces() and pr.hosts_file is not None:
            view.fstab = pr.dir / "fstab-hosts"
            if not view.fstab.exists():
                view.fstab.write_text(mounts.plan([mounts.Mount("/etc/hosts", pr.hosts_file)], [], pr.dir, []).fstab[0] + "\n")
        return view

    async def _spawn(
        self,
        pr: PodRun,
        view: volumes.PathMap,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        *,
        stdout: Any,
        stderr: Any,
        stdin: Any = asyncio.subprocess.DEVNULL,
    ) -> asyncio.subprocess.Process:
        cwd: str | Path = workdir
        if uts_namespaces():
            argv = enter_pod_argv(argv, pr.hostname, view.fstab, workdir)
            cwd = pr.dir  # the working directory may exist only in the new mount namespace
        if pr.network is not None:
            argv = pr.network.enter_argv(argv)
        return await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, stdin=stdin, start_new_session=True
        )

    async def _spawn_in(
        self, pr: PodRun, c: ContainerRun, command: list[str], *, stdin: bool, tty: bool
    ) -> tuple[asyncio.subprocess.Process, int | None]:
        """A process beside the container's (exec, exec probes, hooks): same env, cwd, hostname
        and, where volumes are mounted for real, the container's own mount namespace."""
        view = c.view
        _, env, cwd = self._container_env(pr, c, view)
        argv = [view.rewrite(a) for a in command]
        exe = runtime.resolve_command(argv[0], env.get("PATH"))
        if exe is None:
            raise bad_request(f'exec: "{argv[0]}": executable file not found in $PATH')

        async def spawn(**streams: Any) -> asyncio.subprocess.Process:
            if not pr.real_mounts:
                return await self._spawn(pr, view, [exe, *argv[1:]], env, cwd, **streams)
            if c.process is None or c.process.returncode is not None:
                raise bad_request(f'container "{c.name}" is not running')
            await _entered(c.process.pid)
            wrapped = enter_container_argv(c.process.pid, [exe, *argv[1:]], cwd, network=pr.network is not None)
            return await asyncio.create_subprocess_exec(*wrapped, env=env, cwd=pr.dir, start_new_session=True, **streams)

        if tty:
            import pty

            master, slave = pty.openpty()
            try:
                proc = await spawn(stdout=slave, stderr=slave, stdin=slave)
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            return proc, master
        pipe = asyncio.subprocess.PIPE
        proc = await spawn(stdout=pipe, stderr=pipe, stdin=pipe if stdin else asyncio.subprocess.DEVNULL)
        return proc, None

    async def _exec_probe(self, pr: PodRun, c: ContainerRun, command: list[str], timeout: float) -> tuple[int, bytes]:
        try:
            proc, _ = await self._spawn_in(pr, c, command, stdin=False, tty=False)
        except ApiError as err:
            return 126, err.message.encode()
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return 1, f"command {command!r} timed out".encode()
        return proc.returncode or 0, out + err

    async def _run_once(self, pr: PodRun, c: ContainerRun) -> int:
        """Start the container's process, probe it while it runs; its exit code."""
        spec = c.spec
        if not await self._ensure_image(pr, c):
            return 137
        c.log_path().touch()
        try:
            c.view = self._view(pr, c)
            argv, env, workdir = self._container_env(pr, c, c.view)
            self._event(pr, "Created", f"Created container {c.name}", container=c)
            with open(c.log_path(), "ab") as logfile:
                c.process = await self._spawn(pr, c.view, argv, env, workdir, stdout=logfile, stderr=asyncio.subprocess.STDOUT)
        except (OSError, ValueError, volumes.VolumeError) as exc:
            return self._start_error(pr, c, str(exc))
        c.ran = True
        if pr.killing:  # deleted while starting
            _signal_group(c.process.pid, signal.SIGKILL)
            await c.process.wait()
            return 137
        self._event(pr, "Started", f"Started container {c.name}", container=c)
        post_start = None if c.init else hooks.handler_of(spec, "postStart")
        if post_start is not None and not await self._post_start(pr, c, post_start):
            return await self._ended(pr, c, defaults.timestamp(self.store.now()))
        since = defaults.timestamp(self.store.now())
        c.state = {"running": {"startedAt": since}}
        startup = None if c.init else spec.get("startupProbe")
        readiness = None if c.init else spec.get("readinessProbe")
        liveness = None if c.init else spec.get("livenessProbe")
        c.started = startup is None and not c.init
        c.ready = c.started and readiness is None
        self._publish(pr)
        probe_tasks = []
        if startup:
            probe_tasks.append(
                asyncio.create_task(self._probe_loop(pr, c, "Startup", probes.ProbeSpec.of(startup), readiness, liveness, probe_tasks))
            )
        else:
            probe_tasks.extend(self._after_startup(pr, c, readiness, liveness))
        try:
            await c.process.wait()
        finally:
            for t in probe_tasks:
                t.cancel()
        return await self._ended(pr, c, since)

    async def _ensure_image(self, pr: PodRun, c: ContainerRun) -> bool:
        """The container's image on this node (``images``); False once the pod is being deleted."""
        waiting = dict(c.state.get("waiting") or {})

        def event(reason: str, message: str, warning: bool = False) -> None:
            self._event(pr, reason, message, container=c, warning=warning)
            if reason == "Pulling":
                self._publish(pr)  # the container waits (ContainerCreating) while the image comes

        while not pr.killing:
            try:
                return await self.images.ensure(pr.pod["spec"]["nodeName"], c.spec, event, pr.killed)
            except images.PullFailed as exc:
                c.state = {"waiting": {"reason": exc.reason, "message": exc.message}}
                self._publish(pr)
            try:
                await asyncio.wait_for(pr.killed.wait(), IMAGE_RETRY_S)
            except TimeoutError:
                c.state = {"waiting": waiting} if waiting else c.state
        return False

    async def _ended(self, pr: PodRun, c: ContainerRun, since: str) -> int:
        """The container's main process has exited (or is being killed): its state, its exit code."""
        code = await c.process.wait()
        exit_code = 128 - code if code < 0 else code
        _signal_group(c.process.pid, signal.SIGKILL)  # the container ends with its main process
        if not pr.killing:
            reason = "Completed" if exit_code == 0 else "Error"
            c.state = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": since,
                    "finishedAt": defaults.timestamp(self.store.now()),
                    "containerID": f"sim://{pr.uid}-{c.name}-{c.restart_count}",
                }
            }
            c.ready = False
            c.started = False
            c.kill_reason = None
            self._publish(pr)
        return exit_code

    async def _post_start(self, pr: PodRun, c: ContainerRun, handler: Obj) -> bool:
        """Run the postStart hook; the container is not Running until it returns. On failure the
        container is killed (its preStop hook runs first), as the kubelet does; False then."""
        hook = asyncio.ensure_future(hooks.run_hook(handler, c.spec, pr.ip, self._podref(pr), lambda cmd: self._exec_hook(pr, c, cmd)))
        killed = asyncio.ensure_future(pr.killed.wait())
        await asyncio.wait([hook, killed], return_when=asyncio.FIRST_COMPLETED)
        killed.cancel()
        if not hook.done():  # the pod is being deleted: the kubelet gives up on the hook
            hook.cancel()
            await asyncio.gather(hook, return_exceptions=True)
            return False
        failure = hook.result()
        if failure is None:
            return True
        log.debug("%s", failure)  # may hold what the hook printed: not above debug
        self._event(pr, "FailedPostStartHook", "PostStartHook failed", container=c, warning=True)
        self._event(pr, "Killing", "FailedPostStartHook", container=c)
        await self._stop_container(pr, c, float(pr.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        return False

    async def _stop_container(self, pr: PodRun, c: ContainerRun, grace: float) -> None:
        """The kubelet's killContainer: the preStop hook within the grace period, then SIGTERM,
        then SIGKILL once the rest of the period (at least 2 s after a hook) has passed."""
        proc = c.process
        handler = None if c.init else hooks.handler_of(c.spec, "preStop")
        if proc is not None and proc.returncode is None and handler is not None and grace > 0:
            started = time.monotonic()
            try:
                failure = await asyncio.wait_for(
                    hooks.run_hook(handler, c.spec, pr.ip, self._podref(pr), lambda cmd: self._exec_hook(pr, c, cmd)), grace
                )
            except TimeoutError:
                failure = None
                log.info("PreStop hook for container %s in pod %s did not complete in %ss", c.name, self._podref(pr), grace)
            if failure is not None:
                log.debug("%s", failure)  # may hold what the hook printed: not above debug
                self._event(pr, "FailedPreStopHook", "PreStopHook failed", container=c, warning=True)
            grace = max(grace - (time.monotonic() - started), MIN_GRACE_AFTER_HOOK_S)
        await _stop_process(proc, grace)

    @staticmethod
    def _podref(pr: PodRun) -> str:
        return f"{pr.key[1]}_{pr.key[0]}({pr.uid})"

    async def _exec_hook(self, pr: PodRun, c: ContainerRun, command: list[str]) -> tuple[int, bytes]:
        try:
            proc, _ = await self._spawn_in(pr, c, command, stdin=False, tty=False)
        except ApiError as err:
            return 126, err.message.encode()
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            _signal_group(proc.pid, signal.SIGKILL)
            raise
        return proc.returncode or 0, out + err

    def _after_startup(self, pr: PodRun, c: ContainerRun, readiness: Obj | None, liveness: Obj | None) -> list[asyncio.Task]:
        tasks = []
        if readiness:
            tasks.append(asyncio.create_task(self._probe_loop(pr, c, "Readiness", probes.ProbeSpec.of(readiness), None, None, tasks)))
        if liveness:
            tasks.append(asyncio.create_task(self._probe_loop(pr, c, "Liveness", probes.ProbeSpec.of(liveness), None, None, tasks)))
        return tasks

    async def _probe_loop(
        self,
        pr: PodRun,
        c: ContainerRun,
        kind: str,
        spec: probes.ProbeSpec,
        readiness: Obj | None,
        liveness: Obj | None,
        siblings: list[asyncio.Task],
    ) -> None:
        proc = c.process

        def failed_attempt(why: str) -> None:
            if proc.returncode is None and not pr.killing:
                self._event(pr, "Unhealthy", f"{kind} probe failed: {why}", container=c, warning=True)

        def on_result(ok: bool, why: str) -> None:
            if proc.returncode is not None or pr.killing:
                return
            if kind == "Readiness":
                c.ready = ok
                self._publish(pr)
            elif kind == "Startup" and ok:
                c.started = True
                c.ready = readiness is None
                self._publish(pr)
                siblings.extend(self._after_startup(pr, c, readiness, liveness))
                raise _ProbeDone
            elif not ok:  # liveness, or startup past its failure threshold
                c.kill_reason = kind.lower()
                self._event(pr, "Killing", f"Container {c.name} failed {kind.lower()} probe, will be restarted", container=c)
                grace = (
                    spec.termination_grace_s
                    if spec.termination_grace_s is not None
                    else pr.pod["spec"].get("terminationGracePeriodSeconds", 30)
                )
                siblings.append(asyncio.create_task(self._stop_container(pr, c, float(grace))))
                raise _ProbeDone

        async def attempt() -> tuple[bool, str]:
            return await probes.run_probe(spec, c.spec, pr.ip, lambda cmd, timeout: self._exec_probe(pr, c, cmd, timeout))

        try:
            await probes.ProbeWorker(spec, attempt, on_result, failed_attempt).run()
        except _ProbeDone:
            pass

    def _start_error(self, pr: PodRun, c: ContainerRun, why: str) -> int:
        message = f"failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: {why}: unknown"
        self._event(pr, "Failed", f"Error: {message}", container=c, warning=True)
        with open(c.log_path(), "a") as fh:
            fh.write(message + "\n")
        now = defaults.timestamp(self.store.now())
        c.state = {
            "terminated": {
                "exitCode": 128,
                "reason": "StartError",
                "message": message,
                "startedAt": "1970-01-01T00:00:00Z",
                "finishedAt": now,
            }
        }
        c.ready = c.started = False
        self._publish(pr)
        return 128

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
        if not pod["metadata"].get("deletionTimestamp") and not (pod.get("status") or {}).get("podIP"):
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


def _home_path(container: Obj, env: dict[str, str]) -> str:
    """HOME in the container: its env's, else the image's user's (jovyan in Jupyter images)."""
    if env.get("HOME", "").startswith("/"):
        return env["HOME"].rstrip("/") or "/"
    return "/home/jovyan" if runtime.JUPYTER_IMAGE.search(container.get("image", "")) else "/root"


class _ProbeDone(Exception):
    """Ends a probe worker whose job is done (startup succeeded, container being killed)."""


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_all(processes: list[psutil.Process], sig: int) -> None:
    for child in processes:
        try:
            child.send_signal(sig)
        except psutil.Error:
            pass


async def _stop_process(proc: asyncio.subprocess.Process | None, grace: float) -> None:
    """SIGTERM the container's processes, SIGKILL after ``grace`` seconds.

    A container's processes are its process group and every descendant: a child that started
    a session of its own (JupyterHub's proxy does) is still the container's, and goes with it,
    as a cgroup would take it. Processes that left the tree by double-forking are not found.
    """
    if proc is None:
        return
    family = _descendants(proc.pid) if proc.returncode is None else []
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        _signal_all(family, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(grace, 0.01))
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    # children that ignored SIGTERM or outlived the main process go with it
    _signal_group(proc.pid, signal.SIGKILL)
    _signal_all([p for p in family if p.is_running()], signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
