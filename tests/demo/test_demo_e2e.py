"""`gpuburst demo` end to end, driven over HTTP as students would drive it in a browser.

The demo runs as a subprocess exactly as `make demo` runs it; the test reads its banner, logs in
through the login form, picks the 2-GPU profile in the spawn form, reaches the server's
placement API through the proxy, runs a cell through the kernel websocket, starts a GPU kernel
from a CPU server in kernel mode, stops the servers, and finally presses Ctrl-C (SIGINT) and
checks that nothing is left: processes, pods or ports.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from jupyter_gpuburst.demo import DEFAULT_PASSWORD, free_port, port_is_free
from jupyter_gpuburst.gpu import simulated
from jupyter_gpuburst.sim.testing import wait_until

from .student import Student

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

READY = re.compile(r"demo is ready: (http://\S+)")
LOGIN_TIME = re.compile(r"login page up in ([0-9.]+)s")


class DemoProcess:
    def __init__(self, state: Path, port: int, *extra: str) -> None:
        self.state = state
        self.port = port
        self.extra = extra
        self.proc: asyncio.subprocess.Process | None = None
        self.output: list[str] = []
        self.url = ""
        self.login_s = 0.0

    async def start(self, timeout: float = 60) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jupyter_gpuburst.cli",
            "demo",
            "--port",
            str(self.port),
            "--state-dir",
            str(self.state),
            *self.extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), deadline - time.monotonic())).decode()
            if not line:
                break
            self.output.append(line)
            if m := READY.search(line):
                self.url = m.group(1)
            if m := LOGIN_TIME.search(line):
                self.login_s = float(m.group(1))
                return
        raise AssertionError("demo did not become ready:\n" + "".join(self.output) + self.hub_log())

    def hub_log(self) -> str:
        try:
            return (self.state / "jupyterhub.log").read_text()[-4000:]
        except OSError:
            return ""

    def descendants(self) -> list[psutil.Process]:
        """Every process the demo started, the hub's own session included."""
        assert self.proc is not None
        found = {p.pid: p for p in psutil.Process(self.proc.pid).children(recursive=True)}
        hub_pid = self.state / "jupyterhub.pid"
        if hub_pid.exists():
            try:
                hub = psutil.Process(int(hub_pid.read_text()))
                found.setdefault(hub.pid, hub)
                found.update({p.pid: p for p in hub.children(recursive=True)})
            except (psutil.Error, ValueError):
                pass
        return list(found.values())

    async def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C, as in a terminal; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(self.proc.communicate(), timeout)
        self.output.append(rest.decode())
        return self.proc.returncode

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            for p in self.descendants():
                with_suppress_kill(p)
            self.proc.kill()
            await self.proc.wait()


def with_suppress_kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except psutil.Error:
        pass


def singleuser_processes(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if any("jupyterhub-singleuser" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


async def origin_pods(kubeconfig: Path) -> list[dict]:
    """The pods of the demo's users: their servers and origin kernels in ``default``, and a donor's
    GPU kernels in that donor's kernel namespace (where its key reaches that donor alone)."""
    from jupyter_gpuburst.doctor import connect
    from jupyter_gpuburst.hub.kernels.manifests import donor_kernel_namespace

    view = connect(str(kubeconfig)).cluster
    ours = {"default", donor_kernel_namespace("default", "donor-1")}
    return [p for p in await asyncio.to_thread(view.list_pods) if p["metadata"]["namespace"] in ours]


async def test_two_students_land_on_origin_then_donor_and_everything_stops(tmp_path):
    port = free_port()
    demo = DemoProcess(tmp_path / "state", port)
    students = [Student(f"http://127.0.0.1:{port}", name, DEFAULT_PASSWORD) for name in ("student1", "student2")]
    try:
        await demo.start()
        assert demo.url == f"http://127.0.0.1:{port}"
        banner = "".join(demo.output)
        assert "student1" in banner and "password: gpuburst" in banner and "donor-1 (8 GPUs)" in banner
        # the admin logs in with the password the banner printed for it, never with the students'
        admin_password = re.search(r"admin:\s+teacher;\s+password: (\S+)", banner)[1]
        assert len(admin_password) >= 32
        for password, admits in ((DEFAULT_PASSWORD, False), (admin_password, True)):
            teacher = Student(f"http://127.0.0.1:{port}", "teacher", password)
            try:
                if not admits:
                    with pytest.raises(AssertionError):
                        await teacher.login()
                    continue
                await teacher.login()
                status, users = await teacher.hub_api("GET", "/users")
                assert status == 200 and {u["name"] for u in users} >= {"teacher"}, users
            finally:
                await teacher.close()

        placements = {}
        for student in students:
            await student.login()
            profiles = await student.spawn_form_profiles()
            assert {"cpu", "gpu-1", "gpu-2", "mig-1g"} <= set(profiles), profiles
            await student.start("gpu-2")
            await student.wait_ready()
            await student.open_lab()
            placements[student.name] = await student.server_get("api/gpuburst/placement")

        assert placements["student1"]["site"] == "origin", placements
        assert placements["student2"]["site"] == "donor-1", placements
        assert placements["student2"]["cluster"] == "donor-1"
        assert placements["student2"]["gpu_count"] == 2
        assert placements["student2"]["reason"]
        # the panel's live stream gets through the demo's proxy event by event, not at its end
        (first, placement), (second, sample) = await students[1].first_stream_events(2)
        assert (first, second) == ("placement", "sample")
        assert placement["site"] == "donor-1" and sample["simulated"] is True and sample["gpus"]

        # A MIG slice comes from the origin's partitioned GPU, whatever the whole GPUs do.
        mig = Student(f"http://127.0.0.1:{port}", "student3", DEFAULT_PASSWORD)
        students.append(mig)
        await mig.login()
        await mig.spawn_form_profiles()
        await mig.start("mig-1g")
        await mig.wait_ready()
        await mig.open_lab()
        placements["student3"] = await mig.server_get("api/gpuburst/placement")
        assert (placements["student3"]["site"], placements["student3"]["gpu_resource"]) == ("origin", "nvidia.com/mig-1g.10gb")

        pods = await origin_pods(tmp_path / "state" / "kubeconfig")
        nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert nodes == {"jupyter-student1": "origin-gpu", "jupyter-student2": "donor-1", "jupyter-student3": "origin-mig"}

        for student in students[:2]:
            out = await student.run_cell("import os; print(6 * 7, os.environ['JUPYTER_GPUBURST_SITE'])")
            assert out.split() == ["42", "origin" if student.name == "student1" else "donor-1"]
        gpus = await students[1].server_get("api/gpuburst/gpus")
        assert len(gpus["gpus"]) == 2 and gpus.get("simulated") is True, gpus

        # Kernel mode: the server stays on the origin's CPU node; its GPU kernel goes where a GPU
        # is free (the origin's two GPUs are student1's, so the donor)
        kernels = Student(f"http://127.0.0.1:{port}", "student4", DEFAULT_PASSWORD)
        students.append(kernels)
        await kernels.login()
        assert "cpu-gpu-kernels" in await kernels.spawn_form_profiles()
        await kernels.start("cpu-gpu-kernels")
        await kernels.wait_ready()
        await kernels.open_lab()
        specs = await kernels.kernelspecs()
        assert specs["gpuburst-gpu-1"]["spec"]["display_name"] == "Python 3 (1 GPU)", sorted(specs)
        out = await kernels.run_cell("import os; print(os.environ['JUPYTER_GPUBURST_SITE'])", timeout=60, kernel="gpuburst-gpu-1")
        # the demo keeps files on the origin's volumes: the kernel's first output says it has none
        note, _, site = out.strip().rpartition("\n")
        assert site == "donor-1", out
        assert note.startswith("Note: this GPU kernel runs on donor-1, a donor cluster, without your files."), out
        pods = await origin_pods(tmp_path / "state" / "kubeconfig")
        nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert nodes["jupyter-student4"] == "origin-cpu", nodes
        assert [n for name, n in nodes.items() if name.startswith("gpuburst-kernel-")] == ["donor-1"], nodes
        # the donor's nodes are labelled H100: the kernel's pod simulates that model, as the
        # donor's server pods do, and the panel shows its memory
        deadline = time.monotonic() + 30
        while True:
            (listed,) = (await kernels.server_get("api/gpuburst/kernels"))["kernels"]
            if (listed.get("gpu") or {}).get("memory_total_bytes") is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert listed["gpu"]["memory_total_bytes"] == simulated.MODELS["NVIDIA H100 80GB HBM3"].memory_total_bytes, listed

        assert len(singleuser_processes(demo.descendants())) == 4
        for student in students:
            await student.stop()
        # the GPU kernel's pod went with its server
        assert await origin_pods(tmp_path / "state" / "kubeconfig") == []
        await wait_until(lambda: not singleuser_processes(demo.descendants()), 15, "server processes to end", interval=0.1)

        started = demo.descendants()
        assert started, "the hub and its proxy run as children of the demo"
        assert await demo.interrupt() == 0, "".join(demo.output)
        assert "stopped; nothing left running." in demo.output[-1]
        assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert port_is_free(port)
    finally:
        for student in students:
            await student.close()
        await demo.kill()


async def test_second_run_works_and_login_page_is_quick(tmp_path):
    port = free_port()
    for run in range(2):
        demo = DemoProcess(tmp_path / f"state{run}", port, "--donors", "2", "--donor-gpus", "4")
        try:
            await demo.start()
            assert demo.login_s < 60
            assert "donor-2 (4 GPUs)" in "".join(demo.output)
            assert await demo.interrupt() == 0, "".join(demo.output)
            assert port_is_free(port)
        finally:
            await demo.kill()


async def test_busy_port_and_bad_knobs_are_refused(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jupyter_gpuburst.cli",
            "demo",
            "--port",
            str(busy),
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        assert proc.returncode == 2 and f"port {busy} is in use" in err.decode()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jupyter_gpuburst.cli",
        "demo",
        "--donor-gpus",
        "0",
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2 and "--donor-gpus must be 1-64" in err.decode()


def test_pod_network_namespaces_where_they_cannot_be_had_are_refused(monkeypatch, capsys):
    from jupyter_gpuburst import demo, demo_cli
    from jupyter_gpuburst.sim.kubelet import netns

    monkeypatch.setattr(netns, "unavailable", lambda: "pod network namespaces need root on Linux")
    assert demo_cli.main(["--pod-network", "namespaces", "--port", "2"]) == 2
    assert "gpuburst demo: no pod network namespaces: pod network namespaces need root on Linux" in capsys.readouterr().err
    assert demo.DemoOptions(pod_network="namespaces").hub_ip == "127.0.0.2"
    assert demo.DemoOptions().hub_ip == "127.0.0.1"
    with pytest.raises(ValueError, match="--pod-network must be 'shared' or 'namespaces'"):
        demo.DemoOptions(pod_network="bridge")
    with pytest.raises(ValueError, match="--password must not be empty"):
        demo.DemoOptions(password="")
    with pytest.raises(ValueError, match="--password must be at least 8 characters"):
        demo.DemoOptions(password="short")
    with pytest.raises(ValueError, match="--admin-password must be at least 32 characters"):
        demo.DemoOptions(admin_password="too short for an admin")
    with pytest.raises(ValueError, match="and not the users' password"):
        demo.DemoOptions(password="x" * 32, admin_password="x" * 32)
    with pytest.raises(ValueError, match="--port 10080 is one browsers refuse to open"):
        demo.DemoOptions(port=10080)
    made_up = demo.DemoOptions().with_admin_password().admin_password
    assert len(made_up) >= 32 and made_up != demo.DemoOptions().with_admin_password().admin_password
