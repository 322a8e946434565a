"""A real JupyterHub in a child process, for the hub tests and the spawn benchmarks.

The hub runs exactly as in production (its own process, its own proxy: JupyterHub's
``configurable-http-proxy`` from npm, found as the demo finds it), on free ports, with its state in
a temporary directory. An admin service token is generated for the caller; it is passed to the
hub through the environment and never written to the log.

The hub and its proxy run in sessions of their own (a Ctrl-C in the terminal reaches the
benchmark, which stops them in order), so nothing but this class ends them: a hub that failed
to start or was cancelled while starting is killed with its proxy, a stop or kill ends the
proxy even when the hub is already gone, and the hub stops itself (as on SIGTERM, proxy
included) once the process that started it is gone, however that one ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from jupyter_gpuburst.hub.ports import free_port

ADMIN_SERVICE = "gpuburst-admin"
# JupyterHub's ConfigurableHTTPProxy.pid_file default, relative to the hub's working directory
PROXY_PID_FILE = "jupyterhub-proxy.pid"
ADMIN_TOKEN_ENV = "GPUBURST_ADMIN_TOKEN"


BASE_CONFIG = """
import os
import signal
from jupyter_gpuburst.sim.lifeline import on_parent_exit
# in a session of its own, the hub outlives whoever started it unless it watches them
on_parent_exit(lambda: os.kill(os.getpid(), signal.SIGTERM))
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.JupyterHub.db_url = "sqlite:///{workdir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{workdir}/cookie_secret"
c.JupyterHub.pid_file = "{workdir}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}
c.JupyterHub.cleanup_servers = True
c.JupyterHub.load_roles = [
    {{"name": "gpuburst-admin", "scopes": ["admin:users", "admin:servers", "admin-ui", "read:metrics", "tokens", "list:users", "read:users", "list:services", "read:services", "proxy"], "services": ["{service}"]}},
]
c.JupyterHub.services = [{{"name": "{service}", "api_token": os.environ["{token_env}"]}}]
"""


def running_proxy(workdir: Path) -> psutil.Process | None:
    """The proxy the pid file in a hub's working directory names, if that process is still a
    proxy (the hub removes the file when it stops the proxy; a killed hub leaves it, and its pid
    may have gone to another process since)."""
    try:
        found = psutil.Process(int((Path(workdir) / PROXY_PID_FILE).read_text().strip()))
        return found if any("configurable-http-proxy" in part for part in found.cmdline()) else None
    except (OSError, ValueError, psutil.Error):
        return None


class HubProcess:
    """Start with ``await hub.start()``; stop with ``await hub.stop()`` (also kills the proxy)."""

    def __init__(
        self, workdir: Path, extra_config: str = "", env: dict[str, str] | None = None, log_level: str = "INFO", base_url: str = "/"
    ) -> None:
        self.workdir = Path(workdir)
        # the hub's base_url, "/jhub/" style; set before extra_config, which may read it
        self.base_url = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
        self.extra_config = textwrap.dedent(extra_config)
        self.env = dict(env or {})
        self.log_level = log_level
        self.port = free_port()
        self.hub_port = free_port()
        self.proxy_api_port = free_port()
        self.token = secrets.token_hex(24)
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path = self.workdir / "jupyterhub.log"

    @property
    def url(self) -> str:
        """The public URL, base_url included (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}{self.base_url.rstrip('/')}"

    @property
    def api(self) -> str:
        """The hub's REST API, addressed directly (not through the proxy, one hop fewer)."""
        return f"http://127.0.0.1:{self.hub_port}{self.base_url.rstrip('/')}/hub/api"

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"token {token or self.token}"}

    def config_text(self) -> str:
        from jupyter_gpuburst.demo import proxy_command

        chp = proxy_command()[0]
        base = BASE_CONFIG.format(
            port=self.port,
            hub_port=self.hub_port,
            proxy_api_port=self.proxy_api_port,
            chp=chp,
            workdir=self.workdir,
            service=ADMIN_SERVICE,
            token_env=ADMIN_TOKEN_ENV,
        )
        return base + f"\nc.JupyterHub.base_url = {self.base_url!r}\n" + self.extra_config

    async def start(self, timeout: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "jupyterhub_config.py"
        config.write_text(self.config_text())
        env = {**os.environ, **self.env, ADMIN_TOKEN_ENV: self.token}
        # the proxy and single-user commands are found next to this interpreter
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jupyterhub",
            "-f",
            str(config),
            f"--log-level={self.log_level}",
            cwd=self.workdir,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        try:
            await self._wait_up(timeout)
        except BaseException:
            # exited, too slow, or the caller was stopped meanwhile: its proxy may be up
            await asyncio.shield(self.kill())
            raise

    async def _wait_up(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while True:
                if self.proc.returncode is not None:
                    raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    async with session.get(f"{self.api}/", headers=self.headers()) as resp:
                        if resp.status == 200 and await self._services_routed(session):
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyterhub did not answer within {timeout}s:\n{self.log_tail()}")
                await asyncio.sleep(0.2)

    async def _services_routed(self, session: aiohttp.ClientSession) -> bool:
        """Whether the proxy routes every service with a URL yet: the hub answers its API before
        it has added its services' routes, and a request through the proxy in between gets 404."""
        async with session.get(f"{self.api}/services", headers=self.headers()) as resp:
            resp.raise_for_status()
            services = await resp.json()
        wanted = {service["prefix"] for service in services.values() if service.get("url")}
        if not wanted:
            return True
        async with session.get(f"{self.api}/proxy", headers=self.headers()) as resp:
            resp.raise_for_status()
            routes = await resp.json()
        return wanted <= set(routes)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the hub (it stops its proxy and, with cleanup_servers, its servers); SIGKILL
        after ``timeout``. The proxy goes either way, also when the hub had died already."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            await self.kill()
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        await self.kill()

    async def kill(self) -> None:
        """SIGKILL the hub with no cleanup (a crash), and its proxy: JupyterHub starts the proxy
        in a session of its own, so it outlives the hub's process group."""
        proc, self.proc = self.proc, None
        children: list[psutil.Process] = []
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(proc.pid).children(recursive=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        proxy = running_proxy(self.workdir)
        for child in [*children, *([proxy] if proxy is not None else [])]:
            with contextlib.suppress(psutil.Error):
                child.kill()  # psutil checks it is still the process it found, not a reused pid

    async def capacity(self, session: aiohttp.ClientSession, token: str | None = None) -> tuple[int, Any]:
        """The capacity report from the gpuburst service, through the proxy."""
        async with session.get(f"{self.url}/services/gpuburst/api/capacity", headers=self.headers(token)) as resp:
            body = await resp.text()
            try:
                import json

                return resp.status, json.loads(body) if body else None
            except ValueError:
                return resp.status, body

    async def request(
        self, session: aiohttp.ClientSession, method: str, path: str, token: str | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        """One hub API call; returns (status, parsed JSON or text)."""
        async with session.request(method, f"{self.api}{path}", headers=self.headers(token), **kwargs) as resp:
            body = await resp.text()
            try:
                import json

                return resp.status, json.loads(body) if body else None
            except ValueError:
                return resp.status, body
