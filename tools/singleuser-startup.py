"""Where the time from pod Running to a listening single-user server goes.

Starts `gpuburst sim`, then, interleaved for N rounds: (a) a pod running `jupyterhub-singleuser`
(as KubeSpawner makes it), timing create -> Running (seen by a watch) and Running -> listening;
(b) the same command started by hand with the same environment, timing start -> listening. A
stand-in hub API answers the server's version check. Prints one JSON line per round (with the
load average) and a summary line. The difference between (a) and (b) is what the emulated
kubelet adds; the rest is the server's own start.

    .venv/bin/python tools/singleuser-startup.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kubernetes import client, config, watch


class _Hub(http.server.BaseHTTPRequestHandler):
    def _ok(self) -> None:
        body = b'{"version": "5.5.0"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _ok  # noqa: N815 - http.server calls them by these names

    def log_message(self, *args: object) -> None:
        pass


def wait_listening(ip: str, port: int, since: float, limit: float = 60.0) -> float | None:
    while time.monotonic() - since < limit:
        with socket.socket() as s:
            s.settimeout(0.2)
            try:
                s.connect((ip, port))
                return time.monotonic()
            except OSError:
                time.sleep(0.02)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="singleuser-startup-"))
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = {
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_CLIENT_ID": "c",
        "JUPYTERHUB_USER": "u",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_HOST": "",
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub.server_address[1]}/hub/api",
        "JUPYTERHUB_SERVICE_PREFIX": "/user/u/",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": "/user/u/oauth_callback",
        "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/user/u/",
    }
    gpuburst = Path(sys.executable).parent / "gpuburst"
    sim = subprocess.Popen(
        [str(gpuburst), "sim", "--state-dir", str(work / "state"), "--kubeconfig-out", str(work / "kubeconfig")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for line in sim.stdout:
            if line.startswith("ready"):
                break
        config.load_kube_config(str(work / "kubeconfig"))
        v1 = client.CoreV1Api()

        def in_pod(i: int) -> dict:
            name = f"startup-{i}"
            container = {
                "name": "notebook",
                "image": "quay.io/jupyterhub/singleuser:latest",
                "args": ["jupyterhub-singleuser"],
                "ports": [{"containerPort": 8888, "name": "notebook-port"}],
                "env": [{"name": k, "value": v} for k, v in env.items()],
            }
            start = time.monotonic()
            v1.create_namespaced_pod(
                "default", {"metadata": {"name": name}, "spec": {"containers": [container], "restartPolicy": "OnFailure"}}
            )
            w = watch.Watch()
            for event in w.stream(v1.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=60):
                pod = event["object"]
                if pod.status.phase == "Running" and all(c.ready for c in pod.status.container_statuses or []):
                    running, ip = time.monotonic(), pod.status.pod_ip
                    w.stop()
                    break
            listening = wait_listening(ip, 8888, start)
            v1.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            return {
                "create_to_running_s": round(running - start, 3),
                "running_to_listening_s": round(listening - running, 3) if listening else None,
            }

        def by_hand(i: int) -> dict:
            home = work / f"home-{i}"
            conf = work / "jupyter-config"
            home.mkdir()
            conf.mkdir(exist_ok=True)
            # the kubelet, running as root, adds the same (a container would run unprivileged)
            (conf / "jupyter_server_config.json").write_text('{"ServerApp": {"allow_root": true}}')
            ip = "127.0.0.77"
            local = {
                **os.environ,
                **env,
                "HOME": str(home),
                "JUPYTER_CONFIG_PATH": str(conf),
                "JUPYTERHUB_SERVICE_URL": f"http://{ip}:8888/user/u/",
            }
            start = time.monotonic()
            proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "jupyterhub-singleuser")],
                env=local,
                cwd=home,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            listening = wait_listening(ip, 8888, start)
            proc.terminate()
            proc.wait()
            return {"start_to_listening_s": round(listening - start, 3) if listening else None}

        pods, hands = [], []
        for i in range(args.rounds):
            load = os.getloadavg()
            a, b = (in_pod(i), by_hand(i)) if i % 2 == 0 else (by_hand(i), in_pod(i))[::-1]
            pods.append(a)
            hands.append(b)
            print(json.dumps({"round": i, "pod": a, "by_hand": b, "load_average": [round(x, 2) for x in load]}), flush=True)
        ok_pod = [p["running_to_listening_s"] for p in pods if p["running_to_listening_s"] is not None]
        ok_hand = [h["start_to_listening_s"] for h in hands if h["start_to_listening_s"] is not None]
        print(
            json.dumps(
                {
                    "summary": True,
                    "pod_running_to_listening_s": {"mean": round(statistics.mean(ok_pod), 3), "min": min(ok_pod), "max": max(ok_pod)}
                    if ok_pod
                    else None,
                    "by_hand_start_to_listening_s": {"mean": round(statistics.mean(ok_hand), 3), "min": min(ok_hand), "max": max(ok_hand)}
                    if ok_hand
                    else None,
                    "create_to_running_s_max": max(p["create_to_running_s"] for p in pods),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                }
            )
        )
    finally:
        sim.terminate()
        sim.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
