"""A stand-in for the hub's kernel API that runs each 'pod' as a local kernel pod process (jupyter_gpuburst.kernel.pod).

It answers like ``jupyter_gpuburst.hub.kernels.handlers`` (same paths, codes and fields), so
the provisioner's side of the protocol is tested without a hub or a cluster; the real hub is
tested in ``tests/hub/kernels/test_kernels_integration.py``. As on a cluster, every pod has an address of its own
and listens on the same ports, the second set of them when the request asks for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from tornado import web
from tornado.httpserver import HTTPServer

from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
from jupyter_gpuburst.hub.ports import free_port, free_ports, port_is_free
from jupyter_gpuburst.server.kernels.specs import fetch_profiles, write_kernelspecs

PROFILES = [{"slug": "gpu-1", "display_name": "Python 3 (1 GPU)", "resource": "nvidia.com/gpu", "count": 1}]


def ten_free_ports() -> int:
    """The first of ten ports that nothing listens on, on any address (a listener on all
    addresses holds the port on every pod's address too)."""
    while True:
        base = free_port() // 10 * 10
        if all(port_is_free(base + i, "0.0.0.0") for i in range(10)):
            return base


class FakeHub:
    def __init__(self, token: str, log_dir: Path) -> None:
        self.token = token
        self.log_dir = log_dir  # each pod's output, for a test's failure report
        self.kernels: dict[str, dict[str, Any]] = {}
        self.posts: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.full_reason: str | None = None
        self.full_sites: set[str] = set()
        self.last_site: dict[str, str] = {}
        self.responses: list[str] = []
        self.server: HTTPServer | None = None
        self.port = 0
        # pods' addresses: loopback addresses of their own, far from those other tests use, and
        # a block per test process: xdist's workers each had a FakeHub whose first pod was
        # 127.77.0.2, so two workers' kernels could share an address, and a client whose kernel
        # had gone could reach the other worker's on it
        first = os.getpid() % 48 * 1250
        self.pod_ips = (f"127.77.{n // 250}.{n % 250 + 2}" for n in range(first, first + 1250))
        self.settings = GPUKernelSettings(base_port=ten_free_ports())

    @property
    def kernels_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/services/gpuburst/api/kernels"

    def start(self) -> None:
        app = web.Application(
            [(r"/services/gpuburst/api/kernels", Kernels, {"hub": self}), (r"/services/gpuburst/api/kernels/(\w+)", Kernel, {"hub": self})]
        )
        self.server = HTTPServer(app)
        (self.port,) = free_ports(1)
        self.server.listen(self.port, "127.0.0.1")

    def stop(self) -> None:
        for kernel in self.kernels.values():
            if kernel["process"].poll() is None:
                kernel["process"].kill()
                kernel["process"].wait()
        if self.server is not None:
            self.server.stop()

    def launch(self, body: dict[str, Any]) -> dict[str, Any]:
        # as the hub does: a restarted kernel goes back where its own record says it ran
        site = self.last_site.get(body.get("kernel_id") or "")
        site = site if site not in self.full_sites else None
        site = site or next(s for s in ("origin", "donor-1") if s not in self.full_sites)
        ports, ip = self.settings.ports(body.get("port_set", 0)), next(self.pod_ips)
        connection = {"transport": "tcp", "ip": ip, "key": body["key"], "signature_scheme": body["signature_scheme"], **ports}
        env = {
            **os.environ,
            manifests.CONNECTION_ENV: json.dumps(connection),
            manifests.NOTE_ENV: "Note: scratch space only.",
            "JUPYTER_GPUBURST_SITE": site,
            # as an admin's GPUKernelSettings.extra_env sets it in the emulator
            "JUPYTER_GPUBURST_BACKEND": "simulated",
        }
        record_id = secrets.token_hex(6)
        with open(self.log_dir / f"pod-{record_id}.log", "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "jupyter_gpuburst.kernel.pod"], env=env, stdout=log, stderr=subprocess.STDOUT)
        if body.get("kernel_id"):
            self.last_site[body["kernel_id"]] = site
        record = {"id": record_id, "site": site, "ip": ip, "ports": ports, "process": process, "profile": body["profile"]}
        self.kernels[record["id"]] = record
        return record

    def pod_logs(self) -> str:
        """Every pod's output so far, each under its record id."""
        return "\n".join(f"--- pod {path.stem[4:]}\n{path.read_text(errors='replace')}" for path in sorted(self.log_dir.glob("pod-*.log")))

    def signal_report(self) -> str:
        """Where each running kernel's SIGINT stands, thread by thread (from /proc), for a lost
        interrupt's report: ignored, caught, blocked or pending, and what each thread waits in."""
        lines = []
        for record in self.kernels.values():
            pid = record["process"].pid
            if record["process"].poll() is not None:
                continue
            status = _proc_status(Path(f"/proc/{pid}/status"))
            sigint = [
                name
                for name, mask in (("ignored", "SigIgn"), ("caught", "SigCgt"), ("pending for the process", "ShdPnd"))
                if _has_sigint(status, mask)
            ]
            lines.append(f"--- pod {record['id']} (pid {pid}): SIGINT {', '.join(sigint) or 'default'}")
            for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name)):
                try:
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    wchan = (task / "wchan").read_text().strip() or "-"
                    name = (task / "comm").read_text().strip()
                except OSError:
                    continue
                thread = _proc_status(task / "status")
                flags = [word for word, mask in (("blocked", "SigBlk"), ("pending", "SigPnd")) if _has_sigint(thread, mask)]
                main = " (main)" if task.name == str(pid) else ""
                lines.append(f"  {task.name}{main} {name}: {fields[0]} in {wchan}; SIGINT {', '.join(flags) or 'deliverable'}")
        return "\n".join(lines)

    def state(self, record: dict[str, Any]) -> dict[str, Any]:
        process = record["process"]
        if process.poll() is not None:
            state = "stopped"
        else:
            try:
                socket.create_connection((record["ip"], record["ports"]["hb_port"]), timeout=0.2).close()
                state = "running"
            except OSError:
                state = "pending"
        out = {
            "id": record["id"],
            "state": state,
            "site": record["site"],
            "site_kind": "origin" if record["site"] == "origin" else "donor",
            "profile": record["profile"],
            "node": "gpu-0",
        }
        if state == "running":
            out["connection"] = {"transport": "tcp", "ip": record["ip"], **record["ports"]}
        return out


def _proc_status(path: Path) -> dict[str, str]:
    try:
        return dict(line.split(":\t", 1) for line in path.read_text().splitlines() if ":\t" in line)
    except OSError:
        return {}


def _has_sigint(status: dict[str, str], mask: str) -> bool:
    """Whether SIGINT (signal 2: bit 1) is set in one of /proc's hexadecimal signal masks."""
    return bool(int(status.get(mask, "0").strip() or "0", 16) & (1 << 1))


class Base(web.RequestHandler):
    def initialize(self, hub: FakeHub) -> None:
        self.hub = hub

    def prepare(self) -> None:
        if self.request.headers.get("Authorization") != f"token {self.hub.token}":
            raise web.HTTPError(403)

    def send(self, data: Any, status: int = 200) -> None:
        text = json.dumps(data)
        self.hub.responses.append(text)
        self.set_status(status)
        self.finish(text)


class Kernels(Base):
    def get(self) -> None:
        self.send({"profiles": PROFILES, "kernels": [self.hub.state(k) for k in self.hub.kernels.values()]})

    def post(self) -> None:
        body = json.loads(self.request.body)
        self.hub.posts.append(body)
        if self.hub.full_reason:
            self.send({"status": 503, "message": self.hub.full_reason}, 503)
            return
        self.send(self.hub.state(self.hub.launch(body)), 202)


class Kernel(Base):
    async def get(self, record_id: str) -> None:
        record = self.hub.kernels.get(record_id)
        if record is None:
            self.send({"status": 404, "message": "no GPU kernel"}, 404)
            return
        wait = float(self.get_argument("wait", "0"))
        for _ in range(int(wait * 20)):
            if self.hub.state(record)["state"] != "pending":
                break
            await asyncio.sleep(0.05)
        self.send(self.hub.state(record))

    async def delete(self, record_id: str) -> None:
        record = self.hub.kernels.pop(record_id, None)
        if record is None:
            self.send({"status": 404, "message": "no GPU kernel"}, 404)
            return
        self.hub.deleted.append(record_id)
        record["process"].terminate()
        await asyncio.get_running_loop().run_in_executor(None, record["process"].wait)
        self.set_status(204)
        self.finish()


# ---- fixtures (tests/conftest.py registers this module as a plugin) ---------------------------
TOKEN = "server-token-123"


@pytest.fixture
async def hub(monkeypatch, tmp_path):
    (tmp_path / "pods").mkdir()
    fake = FakeHub(TOKEN, tmp_path / "pods")
    fake.start()
    monkeypatch.setenv("JUPYTER_GPUBURST_KERNELS_URL", fake.kernels_url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
    yield fake
    fake.stop()


@pytest.fixture
async def specs(hub, tmp_path):
    # the server fetches once, synchronously, at start; here from a thread, the stand-in hub
    # being served by this test's event loop
    profiles = await asyncio.to_thread(fetch_profiles, hub.kernels_url, TOKEN)
    names = write_kernelspecs(tmp_path, profiles)
    assert names == ["gpuburst-gpu-1"]
    return KernelSpecManager(kernel_dirs=[str(tmp_path)])
