"""pods/exec over WebSocket: both channel protocols, a terminal, and the refusals before upgrade."""

from __future__ import annotations

import json
import sys

import aiohttp
import pytest

from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.config import ClusterConfig, NodeConfig
from jupyter_gpuburst.sim.testing import wait_for_pod


@pytest.fixture
async def running_pod(tmp_path):
    cluster = Cluster(ClusterConfig(name="c", nodes=(NodeConfig(name="n", resources={}),)), 8, tmp_path)
    await cluster.start()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "box"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": [sys.executable, "-c", "import time;time.sleep(60)"],
                    "env": [{"name": "WHO", "value": "box"}],
                }
            ],
        },
    }
    cluster.store.create("pods", pod, "default")
    await wait_for_pod(cluster.store, "default", "box", lambda p: p["status"].get("phase") == "Running")
    try:
        yield cluster
    finally:
        await cluster.stop()


async def exec_ws(
    cluster: Cluster, protocol: str, command: list[str], stdin: bytes | None = None, *, tty: bool = False, close_stdin: bool = False
) -> dict[int, bytes]:
    params = [("command", c) for c in command] + [
        ("stdout", "true"),
        ("stderr", "false" if tty else "true"),
        ("stdin", "true" if stdin is not None else "false"),
        ("tty", "true" if tty else "false"),
    ]
    channels: dict[int, bytes] = {}
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{cluster.url}/api/v1/namespaces/default/pods/box/exec", params=params, protocols=[protocol]) as ws,
    ):
        assert ws.protocol == protocol
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
        if close_stdin:
            await ws.send_bytes(bytes([255, 0]))
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                channels[msg.data[0]] = channels.get(msg.data[0], b"") + msg.data[1:]
    return channels


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "v5.channel.k8s.io"])
async def test_streams_and_exit_status(running_pod, protocol):
    out = await exec_ws(running_pod, protocol, ["sh", "-c", 'read x; echo "$WHO:$x"; echo e >&2; exit 5'], b"in\n")
    assert out[1] == b"box:in\n" and out[2] == b"e\n"
    status = json.loads(out[3])
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "5"}]
    ok = await exec_ws(running_pod, protocol, ["true"])
    assert json.loads(ok[3]) == {"metadata": {}, "status": "Success"}


async def test_v5_close_ends_stdin_and_tty_merges_output(running_pod):
    out = await exec_ws(running_pod, "v5.channel.k8s.io", ["cat"], b"all of it\n", close_stdin=True)
    assert out[1] == b"all of it\n" and json.loads(out[3])["status"] == "Success"
    term = await exec_ws(running_pod, "v4.channel.k8s.io", ["sh", "-c", "test -t 1 && echo terminal; echo oops >&2"], tty=True)
    assert b"terminal" in term[1] and b"oops" in term[1] and 2 not in term


async def test_refusals_before_the_upgrade(running_pod):
    base = f"{running_pod.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/box/exec", params={"command": "true", "stdout": "true"}) as r:
            assert r.status == 400 and "Upgrade request required" in (await r.json())["message"]
        async with http.get(f"{base}/absent/exec", params={"command": "true", "stdout": "true"}) as r:
            assert r.status == 404
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(
                f"{base}/box/exec", params={"command": "no-such-binary-anywhere", "stdout": "true"}, protocols=["v4.channel.k8s.io"]
            )
        assert err.value.status == 400
