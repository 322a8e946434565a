"""How long the emulated kubelet takes to start a container with volumes.

In a one-node cluster (``sim.testing.one_node_cluster``), creates pods one after the other, each
with a ConfigMap at ``/etc/<x>``, one of its keys as a ``subPath`` file and an emptyDir at
``/home/jovyan`` (two mountpoints the host lacks, so two private overlays where volumes are
mounted for real), running ``sleep``. Times create -> Running in the store, and create -> the
container's program running (its process has exec'd ``sleep``: the mounts are done). Prints one
JSON line with the medians and maxima, the mount mode, the pod network and the load average.
Compare modes with ``GPUBURST_SIM_MOUNTS=rewrite`` (path rewriting) or
``GPUBURST_SIM_NETWORK=namespaces`` (a network namespace per pod) in the same shell, interleaved.

    .venv/bin/python tools/container-start.py [--pods 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_gpuburst.sim.kubelet import mounts, netns
from jupyter_gpuburst.sim.testing import one_node_cluster

SLEEP = shutil.which("sleep") or "/bin/sleep"


def spec(name: str, etc_dir: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": [SLEEP, "60"],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": etc_dir},
                        {"name": "cfg", "mountPath": f"{etc_dir}.conf", "subPath": "a"},
                        {"name": "home", "mountPath": "/home/jovyan"},
                    ],
                }
            ],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "home", "emptyDir": {}}],
        },
    }


async def measure(pods: int) -> dict:
    etc_dir = f"/etc/gpuburst-bench-{secrets.token_hex(3)}"
    running, started = [], []
    with tempfile.TemporaryDirectory() as tmp:
        async with one_node_cluster(Path(tmp), 11) as cluster:
            store = cluster.store
            store.create(
                "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}, "default"
            )
            mode = "rewrite" if mounts.unavailable(Path(tmp)) else "mount"
            for i in range(pods):
                name = f"p{i}"
                t0 = time.perf_counter()
                store.create("pods", spec(name, etc_dir), "default")
                while store.get("pods", "default", name).get("status", {}).get("phase") != "Running":
                    await asyncio.sleep(0.0005)
                running.append(time.perf_counter() - t0)
                pid = cluster.kubelet.processes()[("default", name)]
                while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(SLEEP.encode()):
                    await asyncio.sleep(0.0005)
                started.append(time.perf_counter() - t0)
            for i in range(pods):
                store.delete("pods", "default", f"p{i}")

    def ms(xs: list[float]) -> float:
        return round(statistics.median(xs) * 1000, 1)

    return {
        "pods": pods,
        "mode": mode,
        "pod_network": "namespaces" if netns.requested() else "shared",
        "create_to_running_median_ms": ms(running),
        "create_to_program_median_ms": ms(started),
        "create_to_running_max_ms": round(max(running) * 1000, 1),
        "create_to_program_max_ms": round(max(started) * 1000, 1),
        "loadavg": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    print(json.dumps(asyncio.run(measure(parser.parse_args().pods))))


if __name__ == "__main__":
    main()
