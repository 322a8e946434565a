"""Pods in network namespaces of their own (``GPUBURST_SIM_NETWORK=namespaces``): private
loopback and wildcard ports, pod IPs reachable from the host and from other pods."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

# The real-cluster tier's own programs, so that both tiers test one thing: all addresses' 8000
# answers the pod's name, 127.0.0.1:8001 a private reply (the two ports a JupyterHub pod's proxy
# takes); FETCH prints what a URL answers.
from helpers.programs import FETCH
from helpers.programs import NETWORK_SERVER as SERVER

from jupyter_gpuburst.sim.kubelet import netns
from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))


def server_pod(name: str) -> dict:
    container = {
        "name": "web",
        "image": "python:3.12",
        "command": [sys.executable, "-c", SERVER],
        "env": [{"name": "WHO", "value": name}],
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 1},
    }


def ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])


@pytest.fixture
async def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv(netns.MODE_ENV, "namespaces")
    async with one_node_cluster(tmp_path, 21) as c:
        yield c


async def exec_in(cluster, name: str, *command: str) -> str:
    proc, _ = await cluster.kubelet.open_exec("default", name, None, list(command), stdin=False, tty=False)
    out, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


async def removed(store, name: str) -> None:
    for _ in range(100):
        if not any(p["metadata"]["name"] == name for p in store.list("pods", "default")[0]):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {name} is still there")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a pod of the test's own
        return response.read().decode()


async def test_two_pods_take_the_same_ports_and_reach_each_other(cluster):
    store = cluster.store
    for name in ("a", "b"):
        store.create("pods", server_pod(name), "default")
    a = await wait_for_pod(store, "default", "a", ready, timeout=20)
    b = await wait_for_pod(store, "default", "b", ready, timeout=20)
    ip_a, ip_b = a["status"]["podIP"], b["status"]["podIP"]
    assert ip_a != ip_b and ip_a.startswith("127.")

    # from the host, at each pod IP: each pod's own server
    assert await asyncio.to_thread(get, f"http://{ip_a}:8000/") == "a"
    assert await asyncio.to_thread(get, f"http://{ip_b}:8000/") == "b"
    # inside a pod: its own loopback, and the other pod at its IP
    assert await exec_in(cluster, "a", sys.executable, "-c", FETCH, "http://127.0.0.1:8001/") == "private-a"
    assert await exec_in(cluster, "b", sys.executable, "-c", FETCH, "http://127.0.0.1:8001/") == "private-b"
    assert await exec_in(cluster, "a", sys.executable, "-c", FETCH, f"http://{ip_b}:8000/") == "b"
    assert await exec_in(cluster, "b", sys.executable, "-c", FETCH, "http://localhost:8000/") == "b"
    # the loopback servers are the pods' alone
    with pytest.raises(OSError):
        await asyncio.to_thread(get, f"http://{ip_a}:8001/")


def host_addresses() -> set[str]:
    """Every address of the host's network namespace, IPv4 and IPv6 (a link-local one too), with
    its interface."""
    out = subprocess.run(["ip", "-o", "address", "show"], capture_output=True, text=True, check=True).stdout
    return {" ".join(line.split()[1:4]) for line in out.splitlines()}


class _HostReply(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"host")

    def log_message(self, *args: object) -> None:
        pass


async def test_a_pods_wire_adds_no_address_to_the_hosts_network_and_reaches_the_host(cluster):
    """A new address in the host's namespace is a network change to every program watching for
    one: chromium fails each request still waiting for a connection with ERR_NETWORK_CHANGED, so
    a browser test beside a test with pod networks loaded half a JupyterLab."""
    before = host_addresses()
    host = http.server.ThreadingHTTPServer(("127.0.0.2", 0), _HostReply)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        cluster.store.create("pods", server_pod("wired"), "default")
        await wait_for_pod(cluster.store, "default", "wired", ready, timeout=20)
        assert host_addresses() == before
        # the host, beyond the pod's own loopback, is reached through the node's address
        url = f"http://127.0.0.2:{host.server_address[1]}/"
        assert await exec_in(cluster, "wired", sys.executable, "-c", FETCH, url) == "host"
    finally:
        host.shutdown()
        host.server_close()


async def test_deleting_the_pod_removes_its_wire_and_sandbox(cluster):
    store = cluster.store
    store.create("pods", server_pod("gone"), "default")
    pod = await wait_for_pod(store, "default", "gone", ready, timeout=20)
    wire = Path("/sys/class/net") / netns.host_interface(pod["metadata"]["uid"])
    sandbox = cluster.kubelet._pods[("default", "gone")].network.sandbox
    assert wire.exists()

    store.delete("pods", "default", "gone")
    await removed(store, "gone")
    assert not wire.exists()
    assert sandbox.returncode is not None


async def test_a_pod_ip_handed_out_again_works_at_once(cluster):
    """The route of a deleted pod is gone before its address serves the next pod."""
    store = cluster.store
    seen = set()
    for round_ in range(3):
        name = f"again{round_}"
        store.create("pods", server_pod(name), "default")
        pod = await wait_for_pod(store, "default", name, ready, timeout=20)
        seen.add(pod["status"]["podIP"])
        assert await asyncio.to_thread(get, f"http://{pod['status']['podIP']}:8000/") == name
        store.delete("pods", "default", name)
        await removed(store, name)
    assert len(seen) == 1, f"each pod got a new address, so none was reused: {seen}"


async def test_asked_for_where_it_cannot_be_the_federation_refuses_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv(netns.MODE_ENV, "namespaces")
    monkeypatch.setattr(netns, "unavailable", lambda: "pod network namespaces need root on Linux")
    with pytest.raises(RuntimeError, match="GPUBURST_SIM_NETWORK=namespaces: pod network namespaces need root"):
        async with one_node_cluster(tmp_path, 21):
            pass


def test_a_misspelt_mode_is_refused():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(netns.MODE_ENV, "namespace")
        with pytest.raises(ValueError, match="must be 'shared' or 'namespaces'"):
            netns.requested()
