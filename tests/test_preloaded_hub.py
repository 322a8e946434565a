"""The tests' hubs are forked from a process that has imported JupyterHub (helpers.preloaded):
each must still be what its own command line, directory and environment make it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers.preloaded import PreloadedHub

JUPYTERHUB = str(Path(sys.executable).parent / "jupyterhub")
# a config that reports what the hub process sees, then ends it with a status of its own
REPORTING_CONFIG = """
import json, os, sys, time
from kubernetes_asyncio.config import kube_config
with open("seen.json", "w") as f:
    json.dump({"cwd": os.getcwd(), "env": os.environ.get("GPUBURST_SEEN"), "argv": sys.argv,
               "sid": os.getsid(0), "pid": os.getpid(),
               "kubeconfig": kube_config.KUBE_CONFIG_DEFAULT_LOCATION}, f)
print("config read", flush=True)
# until the test has looked at the process
while not os.path.exists("seen-by-the-test"):
    time.sleep(0.02)
raise SystemExit(3)
"""


def test_a_preloaded_hub_runs_in_its_own_directory_environment_session_and_log(tmp_path):
    (tmp_path / "jupyterhub_config.py").write_text(REPORTING_CONFIG)
    log = tmp_path / "hub.log"
    env = {**os.environ, "GPUBURST_SEEN": "this hub's", "KUBECONFIG": str(tmp_path / "this-hubs.kubeconfig")}
    hub = PreloadedHub([JUPYTERHUB, "-f", str(tmp_path / "jupyterhub_config.py")], tmp_path, env, log)
    assert psutil.Process(hub.pid).name() == "jupyterhub"
    assert os.getsid(hub.pid) == hub.pid
    assert hub.poll() is None and hub.returncode is None
    (tmp_path / "seen-by-the-test").touch()

    assert hub.wait(timeout=60) == 3
    assert hub.returncode == hub.poll() == 3
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"] == "this hub's"
    assert seen["argv"][1:] == ["-f", str(tmp_path / "jupyterhub_config.py")]
    assert seen["pid"] == hub.pid and seen["sid"] == hub.pid
    # kubernetes_asyncio reads KUBECONFIG when it is imported: in the hub, not before the fork
    assert seen["kubeconfig"] == env["KUBECONFIG"]
    assert "config read" in log.read_text()


def test_a_hub_that_cannot_start_reports_its_failure(tmp_path):
    log = tmp_path / "hub.log"
    hub = PreloadedHub([JUPYTERHUB, "--no-such-option"], tmp_path, dict(os.environ), log)
    assert hub.wait(timeout=60) != 0
    assert "no-such-option" in log.read_text()


# a worker that starts a hub and waits; the hub's config blocks, so that JupyterHub's own
# lifeline (the tests' configs set one) never comes into play
WORKER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from helpers.preloaded import PreloadedHub
here = Path({here!r})
hub = PreloadedHub([{jupyterhub!r}, "-f", str(here / "jupyterhub_config.py")], here, dict(os.environ), here / "hub.log")
print(hub.pid, flush=True)
time.sleep(600)
"""
BLOCKING_CONFIG = """
import time
print("config read", flush=True)
while True:
    time.sleep(1)
"""


def test_a_preloaded_hub_and_its_forkserver_end_when_the_test_run_is_killed(tmp_path):
    """A pytest worker killed outright (a CI timeout) must leave no hub, forkserver or
    multiprocessing resource tracker behind."""
    (tmp_path / "jupyterhub_config.py").write_text(BLOCKING_CONFIG)
    script = WORKER.format(tests=str(Path(__file__).parent), here=str(tmp_path), jupyterhub=JUPYTERHUB)
    worker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        hub = psutil.Process(int(worker.stdout.readline()))
        deadline = time.monotonic() + 60
        while "config read" not in (tmp_path / "hub.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        helpers = [hub, hub.parent(), *(p for p in psutil.Process(worker.pid).children() if "resource_tracker" in " ".join(p.cmdline()))]
        assert len(helpers) == 3, helpers
    finally:
        worker.kill()
        worker.wait()
    gone, alive = psutil.wait_procs(helpers, timeout=15)
    assert not alive, [(p.pid, p.name()) for p in alive]
