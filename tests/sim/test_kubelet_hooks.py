"""Lifecycle hooks in the process kubelet: postStart holds the container from Running and kills
it when it fails; preStop runs before SIGTERM, within the grace period."""

from __future__ import annotations

import sys

import pytest

from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod, wait_until

PY = sys.executable


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 7, backoff_initial_s=0.5) as c:
        yield c


def pod(name: str, container: dict, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"volumeMounts": [{"name": "w", "mountPath": "/w"}], **container}],
            "volumes": [{"name": "w", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 5,
            **spec,
        },
    }


def events(store, name: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"]) for e in store.list("events", "default", field_selector=f"involvedObject.name={name}")[0]
    ]


def state_of(p: dict) -> dict:
    statuses = p["status"].get("containerStatuses") or [{}]
    return statuses[0].get("state") or {}


def workdir(cluster: Cluster, name: str):
    return cluster.kubelet._pods[("default", name)].volumes["w"]


# The main process records, on SIGTERM, whether the preStop hook had already run. It says when its
# handler is in place: "running" is reported when the process starts, before Python has set it.
ON_TERM = (
    "import os,signal,sys,time\n"
    "def term(*a):\n"
    "    open('/w/at-term','w').write('hook-first' if os.path.exists('/w/prestop') else 'term-first'); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "open('/w/handler-set','w').close()\n"
    "while True: time.sleep(0.05)\n"
)


def written(path) -> str:
    """The file's text once the container has written it (it is created empty first)."""
    return path.exists() and path.read_text()


async def wait_handler_set(cluster: Cluster, name: str):
    w = workdir(cluster, name)
    await wait_until(lambda: (w / "handler-set").exists(), 15, "the SIGTERM handler is set")
    return w


async def delete_when_handler_set(cluster: Cluster, name: str, pre_stop: dict):
    """Run ON_TERM with ``pre_stop`` as its preStop hook, delete the pod once its SIGTERM handler
    is set, and return its work directory once the container has seen SIGTERM."""
    store = cluster.store
    container = {"name": "main", "image": "python:3.11", "command": [PY, "-c", ON_TERM], "lifecycle": {"preStop": pre_stop}}
    store.create("pods", pod(name, container), "default")
    await wait_for_pod(store, "default", name, lambda p: "running" in state_of(p))
    w = await wait_handler_set(cluster, name)
    store.delete("pods", "default", name)
    await wait_until(lambda: written(w / "at-term"), 15, "the container saw SIGTERM")
    return w


async def test_post_start_holds_the_container_from_running(cluster):
    store = cluster.store
    hook = {"exec": {"command": ["sh", "-c", "sleep 1; touch /w/post-start-done"]}}
    store.create(
        "pods",
        pod("hold", {"name": "main", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"], "lifecycle": {"postStart": hook}}),
        "default",
    )
    running = await wait_for_pod(store, "default", "hold", lambda p: "running" in state_of(p), timeout=15)
    # Running comes only once the hook is done: the file it writes is there by then
    assert (workdir(cluster, "hold") / "post-start-done").exists()
    assert running["status"]["phase"] == "Running"
    assert not [e for e in events(store, "hold") if e[1] == "FailedPostStartHook"]


async def test_failed_post_start_kills_and_restarts_the_container(cluster):
    store = cluster.store
    hook = {"exec": {"command": ["sh", "-c", "echo no-such-config >&2; exit 3"]}}
    store.create(
        "pods",
        pod("bad-hook", {"name": "main", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"], "lifecycle": {"postStart": hook}}),
        "default",
    )
    restarted = await wait_for_pod(
        store, "default", "bad-hook", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1, timeout=20
    )
    assert restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] != 0
    seen = events(store, "bad-hook")
    assert ("Warning", "FailedPostStartHook", "PostStartHook failed") in seen
    assert ("Normal", "Killing", "FailedPostStartHook") in seen
    # the hook's output stays out of events (it may hold secrets), as with the kubelet
    assert not [e for e in seen if "no-such-config" in e[2]]
    assert restarted["status"]["phase"] != "Running" or not state_of(restarted).get("running")


async def test_failed_post_start_under_never_fails_the_pod(cluster):
    store = cluster.store
    hook = {"httpGet": {"path": "/started", "port": 1}}  # nothing listens: the request fails
    store.create(
        "pods",
        pod(
            "never",
            {"name": "main", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"], "lifecycle": {"postStart": hook}},
            restartPolicy="Never",
        ),
        "default",
    )
    failed = await wait_for_pod(store, "default", "never", lambda p: p["status"].get("phase") == "Failed", timeout=20)
    assert failed["status"]["containerStatuses"][0]["restartCount"] == 0
    assert ("Warning", "FailedPostStartHook", "PostStartHook failed") in events(store, "never")


async def test_pre_stop_exec_runs_before_sigterm(cluster):
    store = cluster.store
    w = await delete_when_handler_set(cluster, "stop", {"exec": {"command": ["sh", "-c", "touch /w/prestop"]}})
    assert (w / "at-term").read_text() == "hook-first"
    await wait_until(lambda: not store.list("pods", "default")[0], 15, "the pod is gone")


async def test_pre_stop_http_get_reaches_the_container_before_sigterm(cluster):
    store = cluster.store
    server = (
        "import http.server,os,signal,sys,threading\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        open('/w/prestop','w').write(self.path); self.send_response(500); self.end_headers()\n"
        "    def log_message(self,*a): pass\n"
        "def term(*a):\n"
        "    open('/w/at-term','w').write('hook-first' if os.path.exists('/w/prestop') else 'term-first'); os._exit(0)\n"
        "signal.signal(signal.SIGTERM, term)\n"
        "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n"
    )
    hook = {"httpGet": {"path": "/drain", "port": "http"}}
    c = {
        "name": "web",
        "image": "python:3.11",
        "command": [PY, "-c", server],
        "ports": [{"name": "http", "containerPort": 8080}],
        "lifecycle": {"preStop": hook},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    }
    store.create("pods", pod("drain", c), "default")
    await wait_for_pod(
        store, "default", "drain", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("ready") is True, timeout=15
    )
    w = workdir(cluster, "drain")
    store.delete("pods", "default", "drain")
    await wait_until(lambda: written(w / "at-term"), 15, "the container saw SIGTERM")
    assert (w / "prestop").read_text() == "/drain"
    assert (w / "at-term").read_text() == "hook-first"
    # a 500 is no hook failure: the kubelet does not look at the status code of a hook
    assert not [e for e in events(store, "drain") if e[1] == "FailedPreStopHook"]


async def test_failed_pre_stop_is_an_event_and_the_container_still_stops(cluster):
    store = cluster.store
    w = await delete_when_handler_set(cluster, "badstop", {"exec": {"command": ["sh", "-c", "exit 7"]}})
    assert (w / "at-term").read_text() == "term-first"
    await wait_until(
        lambda: ("Warning", "FailedPreStopHook", "PreStopHook failed") in events(store, "badstop"), 5, "FailedPreStopHook event"
    )


async def test_pre_stop_longer_than_the_grace_period_is_cut_short(cluster):
    store = cluster.store
    hook = {"sleep": {"seconds": 30}}
    store.create(
        "pods",
        pod(
            "slow",
            {"name": "main", "image": "python:3.11", "command": [PY, "-c", ON_TERM], "lifecycle": {"preStop": hook}},
            terminationGracePeriodSeconds=1,
        ),
        "default",
    )
    await wait_for_pod(store, "default", "slow", lambda p: "running" in state_of(p))
    w = await wait_handler_set(cluster, "slow")
    store.delete("pods", "default", "slow")
    # the hook gets the grace period (1 s), SIGTERM comes after it, not after the 30 s sleep
    await wait_until(lambda: written(w / "at-term"), 10, "SIGTERM once the grace period is spent")
    await wait_until(lambda: not store.list("pods", "default")[0], 10, "the pod is gone")
