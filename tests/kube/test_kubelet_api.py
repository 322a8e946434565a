"""pods/exec and pods/log on the real control plane: kube-apiserver forwards them to the node's
kubelet API (sim/kube/kubeletapi.py), which our node agent serves to kube-apiserver alone: exec
over WebSocket as a v4 client asks it, and over SPDY, into which kube-apiserver translates a v5
client's exec (spdyexec.py)."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys

import httpx
import pytest
from helpers.kubetier import admin_clients
from kubernetes_asyncio import client

from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod, wait_until

pytestmark = pytest.mark.kube
GREETING = "hello from the pod"


def talking_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "talk",
                    "image": "python",
                    "command": [sys.executable, "-u", "-c", f"import time; print({GREETING!r}); time.sleep(600)"],
                }
            ],
        },
    }


async def test_exec_and_logs_reach_the_pod_through_its_nodes_kubelet(federation):
    origin = federation.origin
    await wait_until(lambda: origin.store.exists("serviceaccounts", "default", "default"), timeout=60, what="the default ServiceAccount")
    origin.store.create("pods", talking_pod("talk"), "default")
    pod = await wait_for_pod(origin.store, "default", "talk", is_running_ready, timeout=60)
    # the node says where its kubelet serves, as a kubelet reports it
    node = origin.store.get("nodes", None, pod["spec"]["nodeName"])
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == origin.kubelet_port

    async with admin_clients(origin.admin_kubeconfig) as (api, ws):
        core = client.CoreV1Api(api)
        logs = await wait_until(lambda: _log(core), timeout=30, what="the container's greeting in pods/log (kube-apiserver -> the kubelet)")
        assert logs == f"{GREETING}\n"
        # exec over WebSocket (v4.channel.k8s.io, as KubeSpawner's client speaks it): stdout, and
        # a failing command's exit code in the error channel's Status
        out = await client.CoreV1Api(ws).connect_get_namespaced_pod_exec(
            "talk", "default", command=["sh", "-c", "echo out; echo err >&2"], stdout=True, stderr=True
        )
        assert "out" in out
        failing = await client.CoreV1Api(ws).connect_get_namespaced_pod_exec(
            "talk", "default", command=["sh", "-c", "exit 3"], stdout=True, stderr=True, _preload_content=False
        )
        status = None
        async with failing as socket:
            async for message in socket:
                data = message.data if isinstance(message.data, bytes) else message.data.encode()
                if data[:1] == b"\x03" and data[1:]:
                    status = json.loads(data[1:])
        assert status is not None and status["status"] == "Failure", status
        assert status["details"]["causes"][0] == {"reason": "ExitCode", "message": "3"}

    # the `kubernetes` client offers v5.channel.k8s.io, as kubectl does: kube-apiserver speaks
    # SPDY to the kubelet for it. Output, input until the client ends it, and the exit code.
    assert await asyncio.to_thread(_v5_exec, origin.admin_kubeconfig, ["sh", "-c", "echo out; echo err >&2"], None) == (0, "out\n", "err\n")
    assert (await asyncio.to_thread(_v5_exec, origin.admin_kubeconfig, ["sh", "-c", "exit 3"], None))[0] == 3
    assert await asyncio.to_thread(_v5_exec, origin.admin_kubeconfig, ["cat"], "typed\n") == (0, "typed\n", "")
    # with a terminal (its resize stream too): one output, the terminal's line ends
    assert await asyncio.to_thread(_v5_exec, origin.admin_kubeconfig, ["sh", "-c", "test -t 1 && echo terminal"], None, True) == (
        0,
        "terminal\r\n",
        "",
    )

    # the kubelet's API answers kube-apiserver only: the federation's admin is refused there
    # (a real kubelet asks the API server whether a caller may use nodes/proxy), and a caller
    # without a certificate of the site's CA never gets past TLS
    cp = origin.control_plane
    url = f"https://127.0.0.1:{origin.kubelet_port}/containerLogs/default/talk/talk"
    admin = ssl.create_default_context()
    admin.check_hostname = False
    admin.verify_mode = ssl.CERT_NONE
    admin.load_cert_chain(str(cp.harness_cert.cert), str(cp.harness_cert.key))
    async with httpx.AsyncClient(verify=admin) as caller:
        refused = await caller.get(url)
    assert refused.status_code == 403, refused.text
    assert GREETING not in refused.text
    anonymous = ssl.create_default_context()
    anonymous.check_hostname = False
    anonymous.verify_mode = ssl.CERT_NONE
    with pytest.raises(httpx.HTTPError):
        async with httpx.AsyncClient(verify=anonymous) as caller:
            await caller.get(url)


async def _log(core) -> str | None:
    text = await core.read_namespaced_pod_log("talk", "default", container="talk")
    return text or None


def _v5_exec(kubeconfig, command: list[str], typed: str | None, tty: bool = False) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of an exec through the ``kubernetes`` client (v5 offered)."""
    from kubernetes import client as sync_client
    from kubernetes import config as sync_config
    from kubernetes.stream import stream
    from kubernetes.stream.ws_client import STDIN_CHANNEL

    core = sync_client.CoreV1Api(sync_config.new_client_from_config(config_file=str(kubeconfig)))
    session = stream(
        core.connect_get_namespaced_pod_exec,
        "talk",
        "default",
        command=command,
        stdin=typed is not None,
        stdout=True,
        stderr=not tty,
        tty=tty,
        _preload_content=False,
    )
    assert session.subprotocol == "v5.channel.k8s.io", session.subprotocol
    if typed is not None:
        session.write_stdin(typed)
        session.close_channel(STDIN_CHANNEL)
    out, err = [], []
    session.run_forever(timeout=30)
    out.append(session.read_stdout(timeout=0) if session.peek_stdout() else "")
    err.append(session.read_stderr(timeout=0) if session.peek_stderr() else "")
    code = session.returncode
    session.close()
    return code, "".join(out), "".join(err)
