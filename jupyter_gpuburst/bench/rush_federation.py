"""The rush's federation in a process of its own (``gpuburst sim``), read through its Kubernetes API.

Hundreds of students' starts are hundreds of pods created, bound, pulled, started and watched:
the emulator's API servers, schedulers and kubelets must not share one event loop with the
benchmark's own journeys (at 500 students in one process, KubeSpawner's pod creations ran out
of their retries: "The cluster is busy"). So the federation runs as an admin runs it, ``gpuburst
sim --config``, and the benchmark reads what it checks as any client does, with the
kubernetes client and the kubeconfig the federation wrote: pods bound beyond a node's GPUs, the
pools' ready pods, a server pod's site; and it makes the admin's one step on the donor (the
pools' PriorityClass) the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.bench.kernels import overcommitted
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.kernels.prestarted import pool_namespace

START_TIMEOUT_S = 120.0


class FederationView:
    """One API client per cluster of the federation (its kubeconfig's contexts)."""

    def __init__(
        self, apis: dict[str, client.ApiClient], origin: str, kubeconfig: Path, pid: int | None = None, hub_kubeconfig: Path | None = None
    ):
        self.apis = apis
        self.origin = origin
        self.kubeconfig = kubeconfig  # the admin's
        # the hub's: on the real control plane its ServiceAccount's; the emulator's clients are all admins
        self.hub_kubeconfig = hub_kubeconfig or kubeconfig
        self.pid = pid  # the federation's process, whose children are the pods' processes

    def control_plane_pids(self) -> list[int]:
        """The real control planes' processes (etcd, kube-apiserver, ...), children of the
        federation's process; none on the emulator, whose API servers are that process."""
        if self.pid is None:
            return []
        from jupyter_gpuburst.sim.kube.controlplane import COMPONENTS  # the emulator needs none of it

        try:
            children = psutil.Process(self.pid).children()
        except psutil.Error:
            return []
        pids = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.name() in COMPONENTS:
                    pids.append(child.pid)
        return pids

    def core(self, cluster: str | None = None) -> client.CoreV1Api:
        return client.CoreV1Api(self.apis[cluster or self.origin])

    async def _items(self, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        response = await call(*args, _preload_content=False, **kwargs)
        return json.loads(await response.read()).get("items") or []

    async def overcommitted(self) -> int:
        """Pods bound beyond a node's allocatable GPUs, over every cluster (``bench.kernels.overcommitted``)."""
        over = 0
        for name in self.apis:
            core = self.core(name)
            nodes = await self._items(core.list_node)
            pods = await self._items(core.list_pod_for_all_namespaces)
            over += overcommitted(nodes, pods)
        return over

    async def pools_ready(self, namespace: str) -> list[dict[str, Any]]:
        """The pools' pods on the origin (placeholders and pre-started kernels), as listed now: in
        the pools' ``namespace``, and a donor's pre-started kernels in that donor's kernel
        namespace (``prestarted.pool_namespace``), where they wait."""
        waiting_in = {namespace, *(pool_namespace(namespace, site) for site in self.apis)}  # a site's context is named after it
        pods = await self._items(self.core().list_pod_for_all_namespaces, label_selector=keys.POOL_LABEL)
        return [p for p in pods if p["metadata"]["namespace"] in waiting_in]

    async def site_of(self, namespace: str, pod: str) -> str | None:
        try:
            found = await self.core().read_namespaced_pod(pod, namespace, _preload_content=False)
        except ApiException:
            return None
        return ((json.loads(await found.read())["metadata"].get("labels")) or {}).get(keys.SITE_LABEL)


@contextlib.asynccontextmanager
async def federation_process(
    data: dict[str, Any], workdir: Path, control_plane: str = "emulator", users_namespace: str = "default"
) -> AsyncIterator[FederationView]:
    """``gpuburst sim --config`` with ``data`` (rush.yaml, scaled), until the block ends; its
    output goes to ``workdir/sim.log``. On the real control plane (``control_plane="kube"``) it
    installs the hub as docs/install.md says, its users in ``users_namespace``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path, kubeconfig = workdir / "federation.yaml", workdir / "kubeconfig"
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    log_path = workdir / "sim.log"
    argv = [sys.executable, "-m", "jupyter_gpuburst.cli", "sim", "--config", str(config_path), "--kubeconfig-out", str(kubeconfig)]
    argv += ["--control-plane", control_plane]
    if control_plane == "kube":
        argv += ["--install-hub", users_namespace]
    # --stop-with-parent: a benchmark killed outright (no clean-up of its own) still ends it
    argv += ["--state-dir", str(workdir / "pods"), "--gpus", "simulated", "--stop-with-parent"]
    with log_path.open("wb") as log:
        # a session of its own: its pods' processes go with it, whatever happens to the benchmark
        proc = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    apis: dict[str, client.ApiClient] = {}
    try:
        await _ready(proc, log_path)
        contexts, current = config.list_kube_config_contexts(config_file=str(kubeconfig))
        for context in contexts:
            configuration = client.Configuration()
            await config.load_kube_config(config_file=str(kubeconfig), context=context["name"], client_configuration=configuration)
            apis[context["name"]] = client.ApiClient(configuration)
        hub_kubeconfig = workdir / "hub.kubeconfig" if control_plane == "kube" else None
        yield FederationView(apis, current["name"], kubeconfig, proc.pid, hub_kubeconfig)
    finally:
        # shielded: a second cancellation must not leave the federation half stopped
        await asyncio.shield(_close_and_stop(apis, proc))


async def _close_and_stop(apis: dict[str, client.ApiClient], proc: asyncio.subprocess.Process) -> None:
    try:
        for api in apis.values():
            with contextlib.suppress(Exception):  # a client's close must not keep the federation up
                await api.close()
    finally:
        await _stop(proc)


async def _ready(proc: asyncio.subprocess.Process, log_path: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_S
    while b"\nready" not in log_path.read_bytes():
        if proc.returncode is not None or loop.time() > deadline:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the federation did not start (exit {proc.returncode}): {tail}")
        await asyncio.sleep(0.2)


async def _stop(proc: asyncio.subprocess.Process, grace_s: float = 60.0) -> None:
    """SIGTERM (the federation stops its pods), then after ``grace_s`` SIGKILL to it and to its
    pods' processes, which its kubelets start in sessions of their own: those alive then, read
    just before the federation goes (a pod started during its stop is one of them too)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except asyncio.TimeoutError:
            pass
    pods: list[psutil.Process] = []
    if proc.returncode is None:
        with contextlib.suppress(psutil.Error):
            pods = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pod in pods:
        with contextlib.suppress(psutil.Error):
            pod.kill()  # psutil checks it is still the process it listed, not a reused pid
    await proc.wait()
