"""A real JupyterHub process running GPUBurstSpawner against the local federation."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import re
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from helpers.preloaded import PreloadedHub
from jupyter_gpuburst.bench.hubproc import running_proxy
from jupyter_gpuburst.demo import proxy_command
from jupyter_gpuburst.hub.ports import free_port

VENV_BIN = Path(sys.executable).parent
# the federation's admin kubeconfig in the hub's environment, for config that acts as someone
# other than the hub (on the real control plane the hub's own credentials are its RBAC's)
ADMIN_KUBECONFIG_ENV = "GPUBURST_TEST_ADMIN_KUBECONFIG"
# a hub log line's time: "[I 2026-11-30 08:43:00.893 JupyterHub ..." (local time)
LOG_TIME = re.compile(r"\[[A-Z] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")

GPU_PROFILES = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "default": True,
    },
    {
        "display_name": "One GPU",
        "slug": "gpu1",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
    },
    {
        "display_name": "Two GPUs",
        "slug": "gpu2",
        "gpuburst": {"resource": "nvidia.com/gpu", "count": 2},
    },
    {
        "display_name": "One GPU, origin only",
        "slug": "gpu1-local",
        "gpuburst": {"resource": "nvidia.com/gpu", "count": 1, "allowed_sites": ["origin"]},
    },
]


class Hub:
    """Starts, restarts and stops one JupyterHub process (helpers.preloaded); talks to its REST API."""

    def __init__(self, workdir: Path, kubeconfig: Path, extra_config: str = "", admin_kubeconfig: Path | None = None) -> None:
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.admin_kubeconfig = admin_kubeconfig
        self.token = secrets.token_hex(16)
        self.hub_port = free_port()
        self.proxy_port = free_port()
        self.proxy_api_port = free_port()
        self.url = f"http://127.0.0.1:{self.proxy_port}"
        self.extra_config = extra_config
        self.proc: PreloadedHub | None = None
        self.log_path = workdir / "hub.log"
        self._write_config()

    def _write_config(self) -> None:
        config = f"""
import os, signal
from jupyter_gpuburst.sim.lifeline import on_parent_exit
# in a session of its own, the hub would outlive a test run that was killed
on_parent_exit(lambda: os.kill(os.getpid(), signal.SIGTERM))
c = get_config()  # noqa
c.JupyterHub.spawner_class = "gpuburst"
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
c.ConfigurableHTTPProxy.command = {proxy_command()!r}
c.JupyterHub.db_url = "sqlite:///{self.workdir / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{self.workdir / "cookie_secret"}"
c.JupyterHub.pid_file = "{self.workdir / "hub.pid"}"
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = True
c.JupyterHub.last_activity_interval = 3600
c.Authenticator.allow_all = True
c.JupyterHub.services = [{{"name": "tester", "api_token": {self.token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["tester"]}}]
c.KubeSpawner.namespace = "default"
c.KubeSpawner.cmd = [{str(VENV_BIN / "jupyterhub-singleuser")!r}]
c.KubeSpawner.args = ["--allow-root"]
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.http_timeout = 60
c.KubeSpawner.k8s_api_request_retry_timeout = 10
c.KubeSpawner.profile_list = {GPU_PROFILES!r}
c.Spawner.default_url = "/api"
{self.extra_config}
"""
        (self.workdir / "jupyterhub_config.py").write_text(config)

    def start(self) -> None:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        if self.admin_kubeconfig is not None:
            env[ADMIN_KUBECONFIG_ENV] = str(self.admin_kubeconfig)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.proc = PreloadedHub(
            [str(VENV_BIN / "jupyterhub"), "-f", str(self.workdir / "jupyterhub_config.py")], self.workdir, env, self.log_path
        )

    async def wait_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"hub exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _ = await self.api("GET", "/users")
                if status == 200:
                    return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise AssertionError(f"hub did not come up in {timeout}s:\n{self.log()}")

    async def stop(self) -> None:
        """SIGTERM the hub (servers keep running: cleanup_servers is off) and wait for it."""
        children: list[psutil.Process] = []
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(self.proc.pid).children(recursive=True)
            os.killpg(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # the proxy runs in a session of its own: a hub that was killed (by a test, or above)
        # left it running; one that stopped cleanly removed its pid file. Checked to be a proxy
        # still: a pid from an old file may be another process's by now
        proxy = running_proxy(self.workdir)
        for process in [*children, *([proxy] if proxy is not None else [])]:
            with contextlib.suppress(psutil.Error):
                process.kill()

    def log(self) -> str:
        """The hub's whole log: what a test looks for may be far back (on a loaded machine the
        proxy's and the servers' polls fill it fast), and a secret must be absent from all of it."""
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

    def logged_at(self, text: str) -> list[float]:
        """When the hub logged each line holding ``text`` (epoch seconds, its own clock, to the
        millisecond): what the hub did when, apart from how late a loaded machine let a test see it."""
        times = []
        for line in self.log().splitlines():
            stamp = LOG_TIME.match(line)
            if stamp and text in line:
                times.append(datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp())
        return times

    def log_tail(self, chars: int = 6000) -> str:
        """The log's end, for a failing assertion's message."""
        return self.log()[-chars:]

    async def api(self, method: str, path: str, body: Any = None, timeout: float = 60) -> tuple[int, Any]:
        url = f"{self.url}/hub/api{path}"
        headers = {"Authorization": f"token {self.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.request(method, url, json=body, headers=headers) as response:
                text = await response.text()
                try:
                    data = json.loads(text) if text else None
                except ValueError:
                    data = text
                return response.status, data

    async def capacity(self, timeout: float = 60) -> tuple[int, Any]:
        """The gpuburst service's capacity report, through the proxy (hub/service.py)."""
        headers = {"Authorization": f"token {self.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{self.url}/services/gpuburst/api/capacity", headers=headers) as response:
                text = await response.text()
                try:
                    return response.status, json.loads(text) if text else None
                except ValueError:
                    return response.status, text

    async def create_user(self, name: str) -> None:
        status, data = await self.api("POST", f"/users/{name}")
        assert status in (201, 409), (status, data)

    async def spawn(self, user: str, options: dict[str, Any] | None = None, server: str = "") -> tuple[int, Any]:
        await self.create_user(user)
        path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
        return await self.api("POST", path, options or {})

    async def wait_ready(self, user: str, server: str = "", timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            status, data = await self.api("GET", f"/users/{user}")
            last = data
            srv = (data or {}).get("servers", {}).get(server) if status == 200 else None
            if srv and srv.get("ready"):
                return srv
            if status == 200 and not srv:
                raise AssertionError(f"server of {user} is gone (spawn failed): {data}\n{self.log()}")
            await asyncio.sleep(0.2)
        raise AssertionError(f"server of {user} not ready in {timeout}s: {last}\n{self.log()}")

    async def progress(self, user: str, server: str = "", timeout: float = 60) -> list[dict[str, Any]]:
        """Every progress event of the server's current spawn (the event stream ends with it)."""
        path = f"/users/{user}/servers/{server}/progress" if server else f"/users/{user}/server/progress"
        url = f"{self.url}/hub/api{path}"
        events = []
        headers = {"Authorization": f"token {self.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url, headers=headers) as response:
                async for raw in response.content:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        events.append(event)
                        if event.get("ready") or event.get("failed"):
                            break
        return events

    async def get_via_proxy(self, user: str, path: str = "api", server: str = "") -> tuple[int, str]:
        """GET a path of the user's server through the proxy, as a browser would reach it."""
        prefix = f"/user/{user}/{server + '/' if server else ''}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async with session.get(
                f"{self.url}{prefix}{path}", headers={"Authorization": f"token {self.token}"}, allow_redirects=False
            ) as response:
                return response.status, await response.text()

    async def spawn_page(self, user: str) -> str:
        """The spawn form as ``user`` sees it after logging in (DummyAuthenticator)."""
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            async with session.get(f"{self.url}/hub/login") as response:
                await response.text()
            xsrf = next(c.value for c in session.cookie_jar if c.key == "_xsrf")
            async with session.post(
                f"{self.url}/hub/login", data={"username": user, "password": "x", "_xsrf": xsrf}, allow_redirects=False
            ) as response:
                assert response.status == 302, await response.text()
            async with session.get(f"{self.url}/hub/spawn") as response:
                assert response.status == 200
                return await response.text()
