"""Conformance (b): the kubectl these machines ship, against the emulated API server."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest

from jupyter_gpuburst.core import liqo

KUBECTL = "/usr/bin/kubectl"
RBAC = Path(__file__).resolve().parents[2] / "hub_config" / "rbac.yaml"

pytestmark = pytest.mark.skipif(not os.access(KUBECTL, os.X_OK), reason=f"{KUBECTL} is not installed on this machine")


@pytest.fixture
def kubectl_env(apiserver_kubeconfig, tmp_path):
    cache = tmp_path / "kube-cache"  # a stale discovery cache from another run breaks `create`
    return {**os.environ, "KUBECONFIG": str(apiserver_kubeconfig), "KUBECACHEDIR": str(cache), "HOME": str(tmp_path)}


async def kubectl(env: dict, *args: str, timeout: float = 30) -> str:
    proc = await asyncio.create_subprocess_exec(KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


def gpu_node(name: str, ip: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/gpu": ""}},
        "status": {
            "capacity": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": "v1.31.0",
                "osImage": "Debian GNU/Linux 12",
                "kernelVersion": "6.1.0",
                "containerRuntimeVersion": "process://1.0",
                "machineID": "m",
                "systemUUID": "s",
                "bootID": "b",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def table_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


async def test_get_nodes_wide_has_real_columns(apiserver, kubectl_env):
    apiserver.store.create("nodes", gpu_node("gpu-node-1", "127.0.10.1"))
    rows = table_rows(await kubectl(kubectl_env, "get", "nodes", "-o", "wide"))
    assert rows[0][:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    assert rows[1][:3] == ["gpu-node-1", "Ready", "gpu"] and rows[1][4:6] == ["v1.31.0", "127.0.10.1"]


async def test_get_pods_all_namespaces_watch_sees_new_pod(apiserver, kubectl_env):
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "get", "pods", "-A", "-w", env=kubectl_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        await asyncio.sleep(1.0)  # let kubectl list and open its watch
        apiserver.store.create(
            "pods", {"metadata": {"name": "watched"}, "spec": {"containers": [{"name": "notebook", "image": "x:1"}]}}, "kube-public"
        )
        lines = []
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
            assert line, "kubectl ended before showing the pod"
            lines.append(line.split())
            if "watched" in line:
                break
        assert lines[-1][:4] == ["kube-public", "watched", "0/1", "Pending"]
    finally:
        proc.kill()
        await proc.wait()


async def test_create_events_and_delete(apiserver, kubectl_env, tmp_path):
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: nb
          labels: {{app: nb}}
        spec:
          containers:
          - name: notebook
            image: jupyter/base-notebook:2024.1
            resources: {{limits: {{nvidia.com/gpu: 1}}}}
        ---
        apiVersion: {liqo.OFFLOADING_API_VERSION}
        kind: {liqo.NAMESPACE_OFFLOADING_KIND}
        metadata:
          name: {liqo.NAMESPACE_OFFLOADING_NAME}
        spec:
          podOffloadingStrategy: LocalAndRemote
          namespaceMappingStrategy: DefaultName
        """)
    )
    out = await kubectl(kubectl_env, "create", "-f", str(manifest))
    assert "pod/nb created" in out and f"{liqo.NAMESPACE_OFFLOADING_PLURAL[:-1]}.{liqo.OFFLOADING_GROUP}/offloading created" in out
    pod = apiserver.store.get("pods", "default", "nb")
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert (
        apiserver.store.get(f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", "default", "offloading")["spec"][
            "podOffloadingStrategy"
        ]
        == "LocalAndRemote"
    )

    apiserver.store.record_event(
        pod,
        "FailedScheduling",
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "Warning",
        "default-scheduler",
        scheduler_style=True,
    )
    apiserver.store.record_event(
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "other", "namespace": "default", "uid": "u"}}, "Pulled", "pulled", host="n"
    )
    rows = table_rows(await kubectl(kubectl_env, "get", "events", "--field-selector", "involvedObject.name=nb"))
    assert rows[0][:4] == ["LAST", "SEEN", "TYPE", "REASON"]
    assert len(rows) == 2 and rows[1][1:4] == ["Warning", "FailedScheduling", "pod/nb"]

    out = await kubectl(kubectl_env, "delete", "pod", "nb")
    assert 'pod "nb" deleted' in out
    assert apiserver.store.list("pods", "default")[0] == []
    rows = table_rows(await kubectl(kubectl_env, "get", "nsoff"))
    assert rows[0] == ["NAME", "NAMESPACEMAPPINGSTRATEGY", "PODOFFLOADINGSTRATEGY", "OFFLOADINGPHASE", "AGE"]
    assert rows[1][:3] == ["offloading", "DefaultName", "LocalAndRemote"]


@pytest.fixture
async def pod_cluster(tmp_path):
    """One cluster with a kubelet, and kubectl's environment pointed at it."""
    from jupyter_gpuburst.sim.cluster import Cluster
    from jupyter_gpuburst.sim.config import ClusterConfig, NodeConfig
    from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig

    cluster = Cluster(ClusterConfig(name="c", nodes=(NodeConfig(name="n", resources={}),)), 7, tmp_path / "pods")
    await cluster.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"sim": cluster.url}, "sim")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(tmp_path / "kube-cache"), "HOME": str(tmp_path)}
    try:
        yield cluster, env
    finally:
        await cluster.stop()


async def run_kubectl(env: dict, *args: str, stdin: bytes | None = None, timeout: float = 30) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, out.decode(), err.decode()


async def test_the_readmes_rbac_manifest_applies(apiserver, kubectl_env):
    # step 3 of the real-cluster guide, as an admin runs it against `gpuburst sim`: the hub in
    # jhub, the user servers in a namespace apart (jhub-users), which the file names itself
    await kubectl(kubectl_env, "create", "namespace", "jhub")
    await kubectl(kubectl_env, "create", "namespace", "jhub-users")
    out = await kubectl(kubectl_env, "apply", "-f", str(RBAC))
    assert out.split("\n")[:4] == [
        "clusterrole.rbac.authorization.k8s.io/gpuburst-hub-inventory created",
        "clusterrolebinding.rbac.authorization.k8s.io/gpuburst-hub-inventory created",
        "role.rbac.authorization.k8s.io/gpuburst-hub created",
        "rolebinding.rbac.authorization.k8s.io/gpuburst-hub created",
    ]
    assert "unchanged" in await kubectl(kubectl_env, "apply", "-f", str(RBAC))
    role = apiserver.store.get("roles.rbac.authorization.k8s.io", "jhub-users", "gpuburst-hub")
    binding = apiserver.store.get("clusterrolebindings.rbac.authorization.k8s.io", None, "gpuburst-hub-inventory")
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]} in role["rules"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]
    # as kube-apiserver serves them: no generation, since they have no spec
    assert "generation" not in role["metadata"] and "generation" not in binding["metadata"]


async def test_kubectl_as_the_hub_is_refused_until_the_rbac_manifest_grants_it(apiserver, kubectl_env):
    # `kubectl --as` (and `gpuburst doctor --as`) act as the hub's service account: RBAC decides
    hub = ["--as", "system:serviceaccount:jhub:hub"]
    await kubectl(kubectl_env, "create", "namespace", "jhub")
    await kubectl(kubectl_env, "create", "namespace", "jhub-users")
    code, _, err = await run_kubectl(kubectl_env, *hub, "get", "pods", "-n", "jhub-users")
    assert code == 1
    assert (
        'pods is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "pods" in API group "" in the namespace "jhub-users"'
    ) in err
    code, out, _ = await run_kubectl(kubectl_env, *hub, "auth", "can-i", "watch", "nodes")
    assert (code, out.strip()) == (1, "no")

    await kubectl(kubectl_env, "apply", "-f", str(RBAC))
    assert "No resources found" in (await run_kubectl(kubectl_env, *hub, "get", "pods", "-n", "jhub-users"))[2]
    assert (await kubectl(kubectl_env, *hub, "auth", "can-i", "watch", "nodes")).strip() == "yes"
    assert (await kubectl(kubectl_env, *hub, "auth", "can-i", "create", "pods", "-n", "jhub-users")).strip() == "yes"
    code, out, _ = await run_kubectl(kubectl_env, *hub, "auth", "can-i", "create", "pods", "-n", "default")
    assert (code, out.strip()) == (1, "no")
    code, _, err = await run_kubectl(kubectl_env, *hub, "delete", "node", "gpu-a")
    assert code == 1 and 'cannot delete resource "nodes" in API group "" at the cluster scope' in err
    # the admin's own requests are never checked
    assert "jhub" in await kubectl(kubectl_env, "get", "namespaces")


async def test_exec_logs_follow_and_server_side_apply(pod_cluster, tmp_path):
    from jupyter_gpuburst.sim.testing import wait_for_pod

    cluster, env = pod_cluster
    script = "for i in 1 2 3; do echo line$i; sleep 0.3; done; exec sleep 60"
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: talk, labels: {{app: talk}}}}
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - {{name: main, image: busybox, command: [sh, -c, "{script}"], env: [{{name: WHO, value: pod}}]}}
        """)
    )
    code, out, err = await run_kubectl(env, "apply", "--server-side", "-f", str(manifest))
    assert code == 0, err
    assert "serverside-applied" in out
    await wait_for_pod(cluster.store, "default", "talk", lambda p: p["status"].get("phase") == "Running")
    # exec (WebSocket, v5.channel.k8s.io): stdin, stdout, stderr and the exit code
    code, out, err = await run_kubectl(
        env, "exec", "-i", "talk", "--", "sh", "-c", 'read x; echo "$WHO got $x"; echo warn >&2; exit 7', stdin=b"hello\n"
    )
    assert code == 7 and out == "pod got hello\n" and "warn" in err
    # logs -f: everything so far, then new lines as they come; ends when the container stops
    follow = await asyncio.create_subprocess_exec(
        KUBECTL, "logs", "-f", "talk", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    lines = [await asyncio.wait_for(follow.stdout.readline(), 10) for _ in range(3)]
    assert lines == [b"line1\n", b"line2\n", b"line3\n"]
    # a second apply by another manager that changes a field the first owns: a conflict
    manifest.write_text(manifest.read_text().replace("value: pod", "value: other"))
    code, out, err = await run_kubectl(env, "apply", "--server-side", "--field-manager", "someone-else", "-f", str(manifest))
    assert code != 0 and "conflict" in err.lower()
    assert 'conflict with "kubectl"' in err and '.spec.containers[name="main"].env[name="WHO"].value' in err
    cluster.store.delete("pods", "default", "talk")
    assert await asyncio.wait_for(follow.stdout.read(), 15) == b""
    assert await follow.wait() == 0
