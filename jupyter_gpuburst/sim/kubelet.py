"""A process kubelet: runs the pods bound to one cluster's nodes as local processes.

Each pod gets its own loopback address (127.x.y.z) as pod IP. A real pod has its own network
namespace, so a server listening on 0.0.0.0 there is private to the pod; here every process shares
the host's network, so 0.0.0.0 in the container's args and env values is replaced by the pod IP.
Without that, two single-user servers (KubeSpawner passes ``--ip=0.0.0.0``) would collide on 8888.

Only the first container runs; there are no restarts (an exit makes the pod Succeeded or Failed
whatever the restartPolicy), no images, no volumes.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import ipaddress
import logging
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_FIELD_REF = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.podIP", "status.hostIP")


class AddressPool:
    """Hands out free loopback addresses from a /16 such as 127.10.0.0/16."""

    def __init__(self, network: str, *, random_start: bool = False):
        self.network = ipaddress.ip_network(network)
        if not self.network.subnet_of(ipaddress.ip_network("127.0.0.0/8")):
            raise ValueError(f"pod network {network} must be inside 127.0.0.0/8 (loopback)")
        hosts = list(self.network.hosts())
        if random_start:
            # Federations started at once by separate processes on one machine share 127/8;
            # starting at a random offset keeps them from racing for the same first address.
            cut = random.randrange(len(hosts))
            hosts = hosts[cut:] + hosts[:cut]
        self._hosts = iter(hosts)
        self._released: list[str] = []

    def allocate(self, ports: Iterable[int] = ()) -> str:
        """The next address on which every port in ``ports`` can still be bound."""
        ports = list(ports)
        while True:
            if self._released:
                ip = self._released.pop(0)
            else:
                try:
                    ip = str(next(self._hosts))
                except StopIteration:
                    raise RuntimeError(f"pod network {self.network} is exhausted") from None
            if all(_port_free(ip, p) for p in ports or [0]):
                return ip

    def release(self, ip: str) -> None:
        self._released.append(ip)


def _port_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                return False
            raise
    return True


def container_ports(container: Obj) -> list[int]:
    return [int(p["containerPort"]) for p in container.get("ports") or [] if p.get("protocol", "TCP") == "TCP"]


def _subscript(path: str, prefix: str) -> str | None:
    """``metadata.labels['x']`` -> ``x``."""
    if path.startswith(prefix + "['") and path.endswith("']"):
        return path[len(prefix) + 2:-2]
    return None


def resolve_field_ref(pod: Obj, path: str) -> str:
    """The value of a downward-API fieldRef."""
    for prefix in ("metadata.labels", "metadata.annotations"):
        key = _subscript(path, prefix)
        if key is not None:
            return ((pod.get("metadata") or {}).get(prefix.split(".")[1]) or {}).get(key, "")
    if path not in _FIELD_REF:
        raise ValueError(f"unsupported fieldRef fieldPath {path!r}")
    value: Any = pod
    for part in path.split("."):
        value = (value or {}).get(part)
    return "" if value is None else str(value)


def pod_env(pod: Obj, container: Obj, store: Store, replace_ip: str) -> dict[str, str]:
    """The container's environment as the kubelet builds it (service links left out)."""
    env: dict[str, str] = {}
    namespace = pod["metadata"]["namespace"]
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            data = _lookup(store, "configmaps", namespace, source["configMapRef"], None, decode=False)
        else:
            data = _lookup(store, "secrets", namespace, source.get("secretRef") or {}, None, decode=True)
        for k, v in (data or {}).items():
            env[prefix + k] = v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" in item:
            src = item["valueFrom"]
            if "fieldRef" in src:
                value = resolve_field_ref(pod, src["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in src:
                value = _lookup(store, "configmaps", namespace, src["configMapKeyRef"], src["configMapKeyRef"].get("key"), decode=False)
            elif "secretKeyRef" in src:
                value = _lookup(store, "secrets", namespace, src["secretKeyRef"], src["secretKeyRef"].get("key"), decode=True)
            else:
                value = ""  # resourceFieldRef: not emulated
            env[name] = "" if value is None else str(value)
        else:
            env[name] = _expand(str(item.get("value", "")), env)
    return {k: v.replace("0.0.0.0", replace_ip) for k, v in env.items()}


def _lookup(store: Store, rtype: str, namespace: str, ref: Obj, key: str | None, *, decode: bool) -> Any:
    try:
        obj = store.get(rtype, namespace, ref.get("name", ""))
    except ApiError:
        if ref.get("optional"):
            return None
        raise ValueError(f'{rtype[:-1]} "{ref.get("name")}" not found') from None
    data = dict(obj.get("data") or {})
    if decode:
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(obj.get("stringData") or {})
    return data if key is None else data.get(key)


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of earlier variables."""
    for k, v in env.items():
        value = value.replace(f"$({k})", v)
    return value


# Images have no content here; a container without ``command`` runs its image's entrypoint, and
# the Jupyter images (KubeSpawner's default among them) start the single-user server.
JUPYTER_IMAGE = re.compile(r"(^|/)(k8s-singleuser|[a-z-]*notebook|jupyter)[^/]*(:[^/]*)?$|jupyter")
JUPYTER_ENTRYPOINT = ("jupyterhub-singleuser",)


def container_argv(container: Obj) -> list[str]:
    """command + args, as a container runtime builds them from the pod and the image.

    Jupyter images have a pass-through entrypoint (tini) and a default CMD; ``args`` replace
    that CMD, so the stand-in CMD is used only when the pod gives neither command nor args.
    """
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command and not args and JUPYTER_IMAGE.search(container.get("image", "")):
        return list(JUPYTER_ENTRYPOINT)
    return [*command, *args]


def resolve_command(argv0: str, path: str | None = None) -> str | None:
    """The executable for argv[0], looked up on a PATH that starts with this Python's bin dir."""
    if os.sep in argv0:
        return argv0 if os.access(argv0, os.X_OK) else None
    search = os.pathsep.join([str(Path(sys.executable).parent), path or os.environ.get("PATH", "")])
    return shutil.which(argv0, path=search)


def run_as_user(pod: Obj, container: Obj) -> int | None:
    """The uid the container would run as (container securityContext over the pod's)."""
    for ctx in ((container.get("securityContext") or {}), ((pod.get("spec") or {}).get("securityContext") or {})):
        if ctx.get("runAsUser") is not None:
            return int(ctx["runAsUser"])
    return None


def _pretend_unprivileged(pod_dir: Path, env: dict[str, str]) -> None:
    """Where this kubelet runs as root, the process does too: it cannot drop to the container's
    uid, as the interpreter may live in root's home. Jupyter servers refuse to run as root unless
    told it is intended, so tell them through an extra config path (the container would have run
    as an unprivileged user and not needed it)."""
    conf = pod_dir / "jupyter-config"
    conf.mkdir(exist_ok=True)
    (conf / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}\n')
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(conf), env.get("JUPYTER_CONFIG_PATH")]))


@dataclass
class RunningPod:
    uid: str
    ip: str
    log_path: Path
    workdir: Path
    process: asyncio.subprocess.Process | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)
    killing: bool = False


class Kubelet:
    """Runs every pod bound to a non-virtual node of this cluster."""

    def __init__(self, store: Store, pool: AddressPool, *, state_dir: Path, readiness_interval_s: float = 0.05, stop_grace_s: float = 2.0):
        self.store = store
        self.stop_grace_s = stop_grace_s
        self.pool = pool
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.readiness_interval_s = readiness_interval_s
        self._pods: dict[tuple[str, str], RunningPod] = {}
        self._logs: dict[tuple[str, str], Path] = {}
        self._task: asyncio.Task | None = None
        self._virtual_nodes: set[str] = set()

    def log_path(self, namespace: str, name: str) -> Path | None:
        """The pod's log file (the ApiServer's ``log_reader``)."""
        return self._logs.get((namespace, name))

    def processes(self) -> dict[tuple[str, str], int]:
        """Live process ids by (namespace, pod name)."""
        return {k: p.process.pid for k, p in self._pods.items() if p.process and p.process.returncode is None}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kubelet")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(self._kill(p, self.stop_grace_s) for p in list(self._pods.values())), return_exceptions=True)
        for p in self._pods.values():
            for t in p.tasks:
                t.cancel()
        self._pods.clear()

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
                node = (pod.get("spec") or {}).get("nodeName")
                if not node or not self._is_ours(node):
                    continue
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                running = self._pods.get(key)
                if etype == "DELETED":
                    if running and not running.killing:
                        running.killing = True
                        await self._kill(running, 0)
                        self._forget(key)
                    continue
                if running is None and not pod["metadata"].get("deletionTimestamp"):
                    if (pod.get("status") or {}).get("phase", "Pending") == "Pending" and not (pod.get("status") or {}).get("podIP"):
                        self._start_pod(key, pod)
                elif pod["metadata"].get("deletionTimestamp"):
                    if running is None:
                        self._remove(key)
                    elif not running.killing:
                        running.killing = True
                        running.tasks.append(asyncio.create_task(self._terminate(key, running, pod)))
        finally:
            watch.close()

    def _forget(self, key: tuple[str, str]) -> None:
        running = self._pods.pop(key, None)
        if running:
            self.pool.release(running.ip)

    def _remove(self, key: tuple[str, str]) -> None:
        try:
            self.store.remove("pods", *key)
        except ApiError:
            pass

    def _start_pod(self, key: tuple[str, str], pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        ip = self.pool.allocate(container_ports(container))
        pod_dir = self.state_dir / f"{key[0]}_{key[1]}_{pod['metadata']['uid'][:8]}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        running = RunningPod(pod["metadata"]["uid"], ip, pod_dir / "container.log", pod_dir / "home")
        running.log_path.touch()
        self._pods[key] = running
        self._logs[key] = running.log_path
        running.tasks.append(asyncio.create_task(self._launch(key, running, pod), name=f"pod-{key[1]}"))

    def _host_ip(self, node_name: str) -> str:
        node = self.store.get("nodes", None, node_name)
        for addr in (node.get("status") or {}).get("addresses") or []:
            if addr.get("type") == "InternalIP":
                return addr["address"]
        return "127.0.0.1"

    async def _launch(self, key: tuple[str, str], running: RunningPod, pod: Obj) -> None:
        ns, name = key
        container = pod["spec"]["containers"][0]
        cname = container["name"]
        host_ip = self._host_ip(pod["spec"]["nodeName"])
        started = defaults.timestamp(self.store.now())

        def pending_with_ip(p: Obj) -> None:
            st = p.setdefault("status", {})
            st.update({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": running.ip, "podIPs": [{"ip": running.ip}], "startTime": started})

        pod = self.store.mutate("pods", ns, name, pending_with_ip)
        image = container.get("image", "")
        self.store.record_event(pod, "Pulled", f'Container image "{image}" already present on machine', host=pod["spec"]["nodeName"], field_path=f"spec.containers{{{cname}}}")
        argv = container_argv(container)
        argv = [a.replace("0.0.0.0", running.ip) for a in argv]
        try:
            if not argv:
                raise FileNotFoundError(f'no command given and image "{image}" has no emulated entrypoint')
            env = pod_env(pod, container, self.store, running.ip)
            exe = resolve_command(argv[0], env.get("PATH"))
            if exe is None:
                raise FileNotFoundError(f'exec: "{argv[0]}": executable file not found in $PATH')
            workdir = Path(container["workingDir"]) if container.get("workingDir") else running.workdir
            workdir.mkdir(parents=True, exist_ok=True)
            env.setdefault("HOME", str(running.workdir if not container.get("workingDir") else workdir))
            running.workdir.mkdir(parents=True, exist_ok=True)
            env.setdefault("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
            env.setdefault("HOSTNAME", name)
            if os.geteuid() == 0 and run_as_user(pod, container) != 0:
                _pretend_unprivileged(running.workdir.parent, env)
            env.setdefault("TMPDIR", tempfile.gettempdir())
            self.store.record_event(pod, "Created", f"Created container {cname}", host=pod["spec"]["nodeName"], field_path=f"spec.containers{{{cname}}}")
            logfile = open(running.log_path, "ab")  # noqa: SIM115 - the child owns it
            try:
                running.process = await asyncio.create_subprocess_exec(
                    exe, *argv[1:], env=env, cwd=workdir, stdout=logfile, stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                )
            finally:
                logfile.close()
            if running.killing:  # deleted while starting: _terminate saw no process yet
                _signal_group(running.process.pid, signal.SIGKILL)
                await running.process.wait()
                return
        except (OSError, ValueError) as exc:
            self._fail_to_start(key, pod, cname, str(exc))
            return
        self.store.record_event(pod, "Started", f"Started container {cname}", host=pod["spec"]["nodeName"], field_path=f"spec.containers{{{cname}}}")
        since = defaults.timestamp(self.store.now())
        ports = container_ports(container)
        self._set_container(key, pod, cname, running=True, ready=not ports, started_at=since)
        if ports:
            running.tasks.append(asyncio.create_task(self._readiness(key, running, pod, cname, ports, since)))
        code = await running.process.wait()
        if running.killing:
            return
        self._set_container(key, pod, cname, running=False, ready=False, started_at=since, exit_code=code)

    def _fail_to_start(self, key: tuple[str, str], pod: Obj, cname: str, why: str) -> None:
        message = f"failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: {why}: unknown"
        self.store.record_event(pod, "Failed", f"Error: {message}", type="Warning", host=pod["spec"]["nodeName"], field_path=f"spec.containers{{{cname}}}")
        with open(self._pods[key].log_path, "a") as fh:
            fh.write(message + "\n")
        now = defaults.timestamp(self.store.now())
        state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": message, "startedAt": "1970-01-01T00:00:00Z", "finishedAt": now}}
        self._write_status(key, pod, cname, "Failed", ready=False, state=state, started=False)

    async def _readiness(self, key: tuple[str, str], running: RunningPod, pod: Obj, cname: str, ports: list[int], since: str) -> None:
        """Ready once every container port accepts TCP connections on the pod IP."""
        while running.process and running.process.returncode is None and not running.killing:
            if all([await _accepts(running.ip, p) for p in ports]):
                self._set_container(key, pod, cname, running=True, ready=True, started_at=since)
                return
            await asyncio.sleep(self.readiness_interval_s)

    def _set_container(self, key: tuple[str, str], pod: Obj, cname: str, *, running: bool, ready: bool, started_at: str, exit_code: int | None = None) -> None:
        if running:
            state = {"running": {"startedAt": started_at}}
            phase = "Running"
        else:
            now = defaults.timestamp(self.store.now())
            reason = "Completed" if exit_code == 0 else "Error"
            state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started_at, "finishedAt": now}}
            phase = "Succeeded" if exit_code == 0 else "Failed"
        self._write_status(key, pod, cname, phase, ready=ready, state=state, started=running)

    def _write_status(self, key: tuple[str, str], pod: Obj, cname: str, phase: str, *, ready: bool, state: Obj, started: bool) -> None:
        container = pod["spec"]["containers"][0]
        stamp = defaults.timestamp(self.store.now())
        flag = "True" if ready else "False"

        def update(p: Obj) -> None:
            st = p.setdefault("status", {})
            old = {c["type"]: c for c in st.get("conditions") or []}

            def cond(ctype: str, status: str) -> Obj:
                prev = old.get(ctype)
                since = prev["lastTransitionTime"] if prev and prev.get("status") == status else stamp
                c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
                if status == "False" and ctype in ("Ready", "ContainersReady"):
                    c["reason"] = "PodCompleted" if phase == "Succeeded" else "ContainersNotReady"
                    if phase not in ("Succeeded",):
                        c["message"] = f"containers with unready status: [{cname}]"
                return c

            st["phase"] = phase
            st["conditions"] = [
                cond("PodReadyToStartContainers", "True" if phase in ("Pending", "Running") else "False"),
                cond("Initialized", "True"),
                cond("Ready", flag),
                cond("ContainersReady", flag),
                old.get("PodScheduled") or cond("PodScheduled", "True"),
            ]
            st["containerStatuses"] = [{
                "name": cname,
                "image": container.get("image", ""),
                "imageID": f"sim://{container.get('image', '')}",
                "containerID": f"sim://{p['metadata']['uid']}-{cname}",
                "ready": ready,
                "started": started,
                "restartCount": 0,
                "state": state,
                "lastState": {},
            }]

        try:
            self.store.mutate("pods", key[0], key[1], update)
        except ApiError:
            pass  # removed meanwhile

    async def _terminate(self, key: tuple[str, str], running: RunningPod, pod: Obj) -> None:
        grace = int(pod["metadata"].get("deletionGracePeriodSeconds", 30))
        cname = pod["spec"]["containers"][0]["name"]
        self.store.record_event(pod, "Killing", f"Stopping container {cname}", host=pod["spec"]["nodeName"], field_path=f"spec.containers{{{cname}}}")
        await self._kill(running, grace)
        self._forget(key)
        self._remove(key)

    async def _kill(self, running: RunningPod, grace: float) -> None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds."""
        proc = running.process
        if proc is None or proc.returncode is not None:
            return
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(grace, 0.01) if grace else 0.01)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        # children that ignored SIGTERM go with the group
        _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _accepts(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), timeout=0.5)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True
