"""The tests' hubs are forked from a process that has imported JupyterHub (helpers.preloaded):
each must still be what its own command line, directory and environment make it."""

from __future__ import annotations

import json
import os
import sys
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
