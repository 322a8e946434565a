"""Conformance: unmodified KubeSpawner through a real JupyterHub, and a GPU pod offloaded to the donor."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from jupyter_gpuburst.bench.hubproc import PROXY_PID_FILE
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.demo import proxy_command
from jupyter_gpuburst.hub.ports import free_port
from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod, wait_until

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent

HUB_CONFIG = """
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.hub_connect_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.command = [{proxy_cmd!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.db_url = "sqlite:///{tmp}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{tmp}/cookie_secret"
c.JupyterHub.pid_file = "{tmp}/hub.pid"
c.JupyterHub.cleanup_servers = True
c.JupyterHub.services = [{{"name": "conformance", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "conformance", "services": ["conformance"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "list:users", "read:users"]}}]
c.KubeSpawner.namespace = "default"
c.KubeSpawner.image = "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.http_timeout = 60
"""


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting its parent counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
async def test_unmodified_kubespawner_through_jupyterhub(federation, tmp_path):
    hub_port, proxy_port, proxy_api_port = free_port(), free_port(), free_port()
    token = secrets.token_hex(16)
    (tmp_path / "jupyterhub_config.py").write_text(
        HUB_CONFIG.format(
            proxy_port=proxy_port,
            hub_port=hub_port,
            proxy_api_port=proxy_api_port,
            tmp=tmp_path,
            proxy_cmd=proxy_command()[0],
            token=token,
        )
    )
    env = {**os.environ, "KUBECONFIG": str(federation.kubeconfig), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = open(tmp_path / "hub.log", "wb")
    hub = await asyncio.create_subprocess_exec(
        str(BIN / "jupyterhub"),
        "-f",
        str(tmp_path / "jupyterhub_config.py"),
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{hub_port}/hub/api"
    headers = {"Authorization": f"token {token}"}
    store = federation.origin.store
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as http:

            async def hub_up():
                if hub.returncode is not None:
                    raise AssertionError(f"the hub exited with {hub.returncode}:\n{(tmp_path / 'hub.log').read_text()[-4000:]}")
                try:
                    async with http.get(f"{api}/") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(hub_up, 40, "the hub to answer", interval=0.2)
            async with http.post(f"{api}/users/alice") as r:
                assert r.status == 201, await r.text()
            async with http.post(f"{api}/users/alice/server") as r:
                assert r.status in (201, 202), await r.text()

            async def server_ready():
                async with http.get(f"{api}/users/alice") as r:
                    user = await r.json()
                return user["servers"].get("", {}).get("ready")

            await wait_until(server_ready, 60, "alice's server to be ready", interval=0.2)
            pods, _ = store.list("pods", "default", label_selector="component=singleuser-server")
            assert len(pods) == 1
            pod = pods[0]
            assert pod["status"]["phase"] == "Running"
            assert pod["spec"]["nodeName"] in ("origin-cpu", "origin-gpu")
            assert pod["status"]["podIP"].startswith("127.10.")
            pid = federation.origin.kubelet.processes()[("default", pod["metadata"]["name"])]
            assert process_alive(pid)

            # the hub proxies to the single-user server on the pod IP
            async with http.get(f"http://127.0.0.1:{proxy_port}/user/alice/api") as r:
                assert r.status == 200, await r.text()
                assert "version" in await r.json()

            async with http.delete(f"{api}/users/alice/server") as r:
                assert r.status in (202, 204), await r.text()

            async def stopped():
                async with http.get(f"{api}/users/alice") as r:
                    user = await r.json()
                return not user["servers"]

            await wait_until(stopped, 40, "alice's server to stop", interval=0.2)
            await wait_until(lambda: _gone(store, pod["metadata"]["name"]), 10, "the pod to be removed", interval=0.2)
            assert not process_alive(pid)
    finally:
        if hub.returncode is None:
            os.killpg(hub.pid, 15)
            try:
                await asyncio.wait_for(hub.wait(), 10)
            except TimeoutError:
                os.killpg(hub.pid, 9)
                await hub.wait()
        # the proxy runs in a session of its own: a hub that failed to start left it running
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((tmp_path / PROXY_PID_FILE).read_text().strip()), signal.SIGTERM)
        log.close()


async def _gone(store, name: str) -> bool:
    pods, _ = store.list("pods", "default", field_selector=f"metadata.name={name}")
    return not pods


@pytest.mark.timeout(30)
async def test_gpu_pod_pinned_to_donor_runs_there_and_is_reachable_from_origin(federation):
    origin, donor = federation.origin.store, federation.donors["donor-1"].store
    origin.create(f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", liqo.namespace_offloading("default"), "default")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-nb"},
        "spec": {
            "tolerations": [liqo.virtual_node_toleration()],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.donor_node_affinity_term("donor-1")]}
                }
            },
            "containers": [
                {
                    "name": "notebook",
                    "image": "python",
                    "command": [sys.executable, "-m", "http.server", "--bind", "0.0.0.0", "8888"],
                    "ports": [{"containerPort": 8888}],
                    "readinessProbe": {"tcpSocket": {"port": 8888}, "periodSeconds": 1},
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    origin.create("pods", pod, "default")
    running = await wait_for_pod(origin, "default", "gpu-nb", is_running_ready, timeout=15)
    assert running["spec"]["nodeName"] == "donor-1"
    remote = donor.get("pods", liqo.remote_namespace_name("default", "origin"), "gpu-nb")
    assert remote["spec"]["nodeName"].startswith("donor-1-gpu")
    assert running["status"]["podIP"] == remote["status"]["podIP"]
    assert running["status"]["podIP"].startswith("127.11.")
    reader, writer = await asyncio.open_connection(running["status"]["podIP"], 8888)
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.0 200")
    writer.close()
