"""A kubelet's pods do not outlive the Python process it runs in, however its event loop ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

# The kubelet runs in this script's event loop, which SIGTERM ends as it ends a test worker's
# (tests/helpers/sigterm.py: KeyboardInterrupt): out of the loop at once, no teardown awaited.
SCRIPT = """
import asyncio, os, signal, sys
from pathlib import Path
from jupyter_gpuburst.sim.testing import is_running_ready, one_node_cluster, wait_for_pod

state, marker, end = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

def interrupt(signum, frame):
    raise KeyboardInterrupt("signal SIGTERM")

async def main():
    # held until the end: a context manager dropped here would be collected, and its teardown
    # would stop the pods before the signal came
    global running
    running = one_node_cluster(state, 47)
    cluster = await running.__aenter__()
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "long"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "python:3.11",
            "command": [sys.executable, "-c", "import time; time.sleep(300)", marker],
        }]},
    }
    cluster.store.create("pods", pod, "default")
    await wait_for_pod(cluster.store, "default", "long", is_running_ready, timeout=60)
    print("running", flush=True)
    os.kill(os.getpid(), getattr(signal, end))
    await asyncio.sleep(60)

signal.signal(signal.SIGTERM, interrupt)
loop = asyncio.new_event_loop()
try:
    loop.run_until_complete(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize(
    "end",
    [
        "SIGTERM",  # the exit handlers run (processes.started)
        "SIGKILL",  # nothing of the process runs: the pods' parent-death signal (processes.start)
    ],
)
def test_pods_left_running_die_when_the_kubelets_process_exits(tmp_path: Path, end: str) -> None:
    marker = f"pod-of-{tmp_path.name}-{os.getpid()}"  # in the pod's argv, to find its process
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "state"), marker, end], capture_output=True, text=True, timeout=120)
    assert "running" in run.stdout, f"the pod did not start:\n{run.stdout}\n{run.stderr}"
    if end == "SIGTERM":
        assert "interrupted" in run.stdout, f"the script did not reach its interruption:\n{run.stdout}\n{run.stderr}"
    else:
        assert run.returncode == -signal.SIGKILL
    assert_gone(marker)


def assert_gone(marker: str) -> None:
    deadline = time.monotonic() + 10
    while left := [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]:
        if time.monotonic() > deadline:
            for process in left:
                process.kill()
            raise AssertionError(f"the pod's process outlived its kubelet's process: {[p.pid for p in left]}")
        time.sleep(0.1)
