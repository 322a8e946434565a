"""A benchmark's hub never leaves its proxy running: JupyterHub starts the proxy in a session of
its own, so a hub that died (killed, or failed to start) leaves it behind unless its stop or
kill ends it too; and the hub stops itself once whoever started it is gone."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from jupyter_gpuburst.bench import hubproc
from jupyter_gpuburst.bench.hubproc import PROXY_PID_FILE, HubProcess, running_proxy
from jupyter_gpuburst.sim.testing import wait_until

SLEEP = "import time; time.sleep(120)"


def fake_proxy(workdir: Path) -> subprocess.Popen:
    """A process named as the proxy is, in a session of its own, its pid where the hub writes it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEP, "configurable-http-proxy", "--port", "1"], start_new_session=True
    )  # fmt: skip
    (workdir / PROXY_PID_FILE).write_text(f"{proc.pid}\n")
    return proc


async def dead_hub() -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()
    return proc


async def test_stopping_a_hub_that_already_died_ends_the_proxy_it_left(tmp_path):
    proxy = fake_proxy(tmp_path)
    try:
        hub = HubProcess(tmp_path)
        hub.proc = await dead_hub()
        await hub.stop()
        assert await asyncio.to_thread(proxy.wait, 10) is not None
    finally:
        proxy.kill()


async def test_killing_a_hub_ends_its_proxy_and_anything_else_it_started(tmp_path):
    proxy = fake_proxy(tmp_path)
    hub = HubProcess(tmp_path)
    # a hub with a child of its own in another session, as JupyterHub's proxy is
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}], start_new_session=True); time.sleep(120)"
    hub.proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, start_new_session=True)
    try:
        hub_process = psutil.Process(hub.proc.pid)
        [child] = await wait_until(lambda: hub_process.children(), 30, "the hub's child")
        await hub.kill()
        assert hub.proc is None
        assert await asyncio.to_thread(proxy.wait, 10) is not None
        await wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 10, "the hub's child to end")
    finally:
        proxy.kill()


def test_a_pid_file_naming_some_other_process_is_left_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", SLEEP])
    try:
        (tmp_path / PROXY_PID_FILE).write_text(str(other.pid))
        assert running_proxy(tmp_path) is None
        (tmp_path / PROXY_PID_FILE).write_text("not a pid")
        assert running_proxy(tmp_path) is None
    finally:
        other.kill()
        other.wait()


def test_the_hub_config_stops_the_hub_once_its_starter_is_gone(tmp_path):
    """The config's first lines, run by a process whose parent then exits: it gets SIGTERM, as
    JupyterHub stops on it (its proxy included)."""
    noted = tmp_path / "signal"
    lines = hubproc.BASE_CONFIG.split("c = get_config()")[0]
    child_script = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (open({str(noted)!r}, 'w').write('SIGTERM'), sys.exit(0)))\n"
        + lines
        + "\nprint('watching', flush=True)\ntime.sleep(60)\n"
    )
    starter = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child_script!r}], stdout=subprocess.PIPE, text=True, start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "p.stdout.readline()\n"
    )
    out = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=60, check=True)
    try:
        watcher = psutil.Process(int(out.stdout.split()[0]))
    except psutil.NoSuchProcess:
        # it may have ended and been reaped already: its parent's exit made it an orphan, and
        # whoever adopts orphans here (init, a container's PID 1, a subreaper) reaps it at once,
        # while this test may not run again for longer than the lifeline's period under load
        watcher = None
    try:
        if watcher is not None:
            watcher.wait(30)  # its parent has exited: it ends within the lifeline's period
        assert noted.read_text() == "SIGTERM"
    finally:
        if watcher is not None and watcher.is_running():
            os.kill(watcher.pid, signal.SIGKILL)
