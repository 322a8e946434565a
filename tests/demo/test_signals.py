"""SIGTERM in the middle of `gpuburst bench rush`, `gpuburst bench chaos` and `gpuburst demo`
leaves nothing running: no federation, hub, proxy or pod process, no listening port.

Each command runs with a mark of its own in its environment; what it started is every process
carrying that mark (the hub, its proxy, a federation in a process of its own) and every
descendant of those and of the command (pods: the kubelet gives them an environment of their
own), watched from the start until the command has exited, so that one reparented when its
parent went is still counted. The signal comes once the hub, its proxy and a pod are up, waited
for, not slept for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from helpers.processes import alive

from jupyter_gpuburst.hub.ports import free_port
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

MARK_ENV = "GPUBURST_SIGNAL_TEST_MARK"
STARTED_S = 240.0  # a hub, its proxy and a pod up, from a cold start on a loaded machine
STOPPED_S = 120.0  # the command's own clean-up
GONE_S = 5.0  # a process killed with SIGKILL a moment before the command exited


class Command:
    """One `gpuburst` command in a session of its own (a signal reaches it alone)."""

    def __init__(self, state: Path, *argv: str) -> None:
        self.state = state
        self.argv = [sys.executable, "-m", "jupyter_gpuburst.cli", *argv]
        self.mark = uuid.uuid4().hex
        self.log = state.parent / f"{state.name}.out"
        self.proc: asyncio.subprocess.Process | None = None
        self.seen: dict[int, psutil.Process] = {}

    async def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, MARK_ENV: self.mark, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def processes(self) -> list[psutil.Process]:
        """Every live process this command started, itself excluded: those carrying its mark,
        and their descendants and its own (pods: the kubelet gives them an environment of their
        own). Each one found is remembered, so that one reparented once the command is gone is
        still found."""
        assert self.proc is not None
        roots = []
        for p in psutil.process_iter(["environ"]):
            if (p.info["environ"] or {}).get(MARK_ENV) == self.mark:
                roots.append(p)
        with contextlib.suppress(psutil.Error):
            roots.append(psutil.Process(self.proc.pid))
        for root in roots:
            self.seen[root.pid] = root
            with contextlib.suppress(psutil.Error):
                self.seen.update({child.pid: child for child in root.children(recursive=True)})
        return [p for pid, p in self.seen.items() if pid != self.proc.pid and alive(p)]

    def roles(self) -> dict[str, list[psutil.Process]]:
        out: dict[str, list[psutil.Process]] = {"hub": [], "proxy": [], "federation": [], "pod": []}
        hub_side: set[int] = set()
        processes = self.processes()
        for p in processes:
            with contextlib.suppress(psutil.Error):
                line = " ".join(p.cmdline())
                if "jupyterhub" in line and " -f " in line:
                    hub_side |= {p.pid, *(c.pid for c in p.children(recursive=True))}
        for p in processes:
            try:
                line = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if "configurable-http-proxy" in line:
                out["proxy"].append(p)
            elif "jupyterhub" in line and " -f " in line:
                out["hub"].append(p)
            elif "jupyter_gpuburst.cli sim" in line:
                out["federation"].append(p)
            elif p.pid not in hub_side:
                out["pod"].append(p)
        return out

    def listening(self, pids: set[int]) -> set[tuple[str, int]]:
        """(address, port) each of ``pids`` listens on: pods share ports (8888) on addresses of their own."""
        return {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.pid in pids}

    async def wait_running(self, what: str) -> dict[str, list[psutil.Process]]:
        assert self.proc is not None

        def up() -> dict[str, list[psutil.Process]] | None:
            if self.proc.returncode is not None:
                raise AssertionError(f"{what} exited with {self.proc.returncode} before the hub and a pod were up:\n{self.output()}")
            roles = self.roles()
            if not (roles["hub"] and roles["proxy"] and roles["pod"]):
                return None
            # their processes may exist a moment before they listen (a loaded fresh clone sent
            # SIGTERM then, and the check found no port to check): up is listening
            listening = self.listening({p.pid for p in self.processes()} | {self.proc.pid})
            return roles if listening else None

        return await wait_until(up, STARTED_S, f"{what}'s hub, proxy and a pod, listening", interval=0.5)

    async def terminate_and_check(self, what: str) -> None:
        """SIGTERM now; the command ends by itself, leaving no process and no listening port."""
        assert self.proc is not None
        started = self.processes()
        ports = self.listening({p.pid for p in started} | {self.proc.pid})
        assert ports, f"{what} listened on no port before the signal"
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOPPED_S
        while self.proc.returncode is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{what} did not stop within {STOPPED_S}s of SIGTERM:\n{self.output()}")
            self.processes()  # what it starts while stopping counts too
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 0.2)
        deadline = time.monotonic() + GONE_S
        while (left := self.processes()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        described = [_describe(p) for p in left]
        self.kill()  # what a failed check found, so that it does not outlive the test
        assert not described, f"{what} left {len(described)} process(es) after SIGTERM: {described[:10]}\n{self.output()}"
        still = {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN} & ports
        assert not still, f"{what} left {sorted(still)} listening after SIGTERM"

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        for p in self.processes():
            try:
                p.kill()
            except psutil.Error:
                pass


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {' '.join(p.cmdline())[:120]}"
    except psutil.Error:
        return str(p.pid)


@pytest.fixture
def command(tmp_path):
    made: list[Command] = []

    def make(*argv: str) -> Command:
        made.append(Command(tmp_path / "state", *argv, "--state-dir", str(tmp_path / "state")))
        return made[-1]

    yield make
    for c in made:
        c.kill()


async def test_sigterm_mid_rush_leaves_nothing_running(command):
    # server mode without pools first: the students' servers are pods as soon as they start.
    # Their arrivals (the default seed) spread over the window: 4 s, 43 s and 56 s into a 120 s
    # one, so the rush is still on when the signal comes; in a 2 s window a fresh clone's rush
    # had ended, its hub and federation stopping, between the wait and the signal.
    rush = command("bench", "rush", "--students", "3", "--rounds", "1", "--mode", "server", "--window", "120")
    rush.argv += ["--pull-speedup", "50", "--start-timeout", "120", "--warm-up-timeout", "120", "--json"]
    await rush.start()
    roles = await rush.wait_running("bench rush")
    assert roles["federation"], "the federation runs in a process of its own"
    await rush.terminate_and_check("bench rush")


async def test_sigterm_mid_chaos_leaves_nothing_running(command):
    # warm pools on: their placeholders are pods from the hub's first seconds
    chaos = command("bench", "chaos", "--spawns", "3", "--span", "10", "--attempts", "1", "--start-timeout", "60", "--json")
    await chaos.start()
    await chaos.wait_running("bench chaos")
    await chaos.terminate_and_check("bench chaos")


async def test_sigterm_to_a_running_demo_leaves_nothing_running(command):
    from kubernetes_asyncio import client, config

    demo = command("demo", "--port", str(free_port()), "--gpus", "simulated")
    await demo.start()
    kubeconfig = demo.state / "kubeconfig"

    def login_page_up() -> bool:
        if demo.proc.returncode is not None:
            raise AssertionError(f"the demo exited with {demo.proc.returncode}:\n{demo.output()}")
        return "login page up" in demo.output()

    await wait_until(login_page_up, STARTED_S, "the demo's login page", interval=0.5)
    # a pod of its own, as a student's server would be
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sleeper"},
            "spec": {
                "containers": [{"name": "main", "image": "python", "command": [sys.executable, "-c", "import time; time.sleep(600)"]}]
            },
        }
        await client.CoreV1Api(api).create_namespaced_pod("default", pod)
    await demo.wait_running("demo")
    await demo.terminate_and_check("demo")
