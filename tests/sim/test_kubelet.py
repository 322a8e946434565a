"""The process kubelet: processes, env, addresses, phases, events, logs and deletion."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import aiohttp
import kubernetes_validate
import pytest

from jupyter_gpuburst.sim.kubelet import AddressPool, container_argv, resolve_field_ref
from jupyter_gpuburst.sim.testing import is_running_ready, one_node_cluster, wait_for_pod, wait_until

PY = sys.executable


def pod(name: str, command: list[str], **container) -> dict:
    c = {"name": "main", "image": "python:3.11", "command": command, **container}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "x"}, "annotations": {"note": "hi"}},
        "spec": {"containers": [c], "terminationGracePeriodSeconds": 1, "restartPolicy": "Never"},
    }


def server(name: str) -> dict:
    return pod(
        name,
        [PY, "-m", "http.server", "--bind", "0.0.0.0", "8888"],
        ports=[{"containerPort": 8888}],
        readinessProbe={"tcpSocket": {"port": 8888}, "periodSeconds": 1},
    )


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 5, {"nvidia.com/gpu": 2}) as c:
        yield c


def live_group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (an orphan's zombie waits for init)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def phase_is(*phases):
    return lambda p: p["status"].get("phase") in phases


async def test_two_servers_on_one_port_get_distinct_pod_ips_and_become_ready(cluster):
    store = cluster.store
    store.create("pods", server("a"), "default")
    store.create("pods", server("b"), "default")
    a = await wait_for_pod(store, "default", "a", is_running_ready)
    b = await wait_for_pod(store, "default", "b", is_running_ready)
    assert a["status"]["podIP"] != b["status"]["podIP"]
    assert a["status"]["podIP"].startswith("127.15.") and a["status"]["hostIP"].startswith("127.15.0.")
    cs = a["status"]["containerStatuses"][0]
    assert cs["ready"] and cs["started"] and cs["restartCount"] == 0 and "startedAt" in cs["state"]["running"]
    for ip in (a["status"]["podIP"], b["status"]["podIP"]):
        async with aiohttp.ClientSession() as http, http.get(f"http://{ip}:8888/") as r:
            assert r.status == 200
    events, _ = store.list("events", "default", field_selector="involvedObject.name=a")
    # a readiness probe that ran before the server listened adds Warning Unhealthy events
    assert [e["reason"] for e in events if e["reason"] != "Unhealthy"] == ["Scheduled", "Pulled", "Created", "Started"]
    for obj in [*events, *store.list("nodes")[0], store.get("pods", "default", "a")]:
        kubernetes_validate.validate(obj, "1.31", strict=True)


async def test_env_field_refs_and_zero_address_replacement(cluster):
    store = cluster.store
    env = [
        {"name": "PLAIN", "value": "v"},
        {"name": "EXPANDED", "value": "$(PLAIN)-x"},
        {"name": "URL", "value": "http://0.0.0.0:8888/user/a/"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    store.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}}, "default")
    script = "import os,json;print(json.dumps({k: os.environ.get(k) for k in ['PLAIN','EXPANDED','URL','POD_NAME','POD_NS','NODE','IP','LABEL','NOTE','SECRET','HOME']}));print(os.getcwd())"
    store.create("pods", pod("env", [PY, "-c", script], env=env), "default")
    done = await wait_for_pod(store, "default", "env", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

    out = cluster.kubelet.log_path("default", "env").read_text().splitlines()
    values = json.loads(out[0])
    ip = done["status"]["podIP"]
    assert values["PLAIN"] == "v" and values["EXPANDED"] == "v-x"
    assert values["URL"] == f"http://{ip}:8888/user/a/"
    assert (values["POD_NAME"], values["POD_NS"], values["NODE"], values["IP"]) == ("env", "default", "n", ip)
    assert (values["LABEL"], values["NOTE"], values["SECRET"]) == ("x", "hi", "secret")
    assert out[1] == values["HOME"] and os.path.isdir(values["HOME"])


async def test_each_pod_has_a_tmp_of_its_own(cluster):
    # what a program writes to its temporary directory stays in its pod, as in a container's
    # own file system, and not in the host's shared /tmp
    store = cluster.store
    script = "import os,tempfile;d=tempfile.gettempdir();open(os.path.join(d,'mine'),'w').write(os.environ['HOSTNAME']);print(d)"
    for name in ("tmp-a", "tmp-b"):
        store.create("pods", pod(name, [PY, "-c", script]), "default")
    dirs = {}
    for name in ("tmp-a", "tmp-b"):
        done = await wait_for_pod(store, "default", name, phase_is("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded"
        dirs[name] = cluster.kubelet.log_path("default", name).read_text().splitlines()[0]
    assert dirs["tmp-a"] != dirs["tmp-b"] and tempfile.gettempdir() not in dirs.values()
    for name, directory in dirs.items():
        assert (Path(directory) / "mine").read_text() == name


async def test_failing_process_reports_exit_code_and_log_via_api(cluster):
    store = cluster.store
    store.create("pods", pod("bad", [PY, "-c", "print('boom'); raise SystemExit(3)"]), "default")
    done = await wait_for_pod(store, "default", "bad", phase_is("Failed"))
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    kubernetes_validate.validate(done, "1.31", strict=True)
    async with aiohttp.ClientSession() as http, http.get(f"{cluster.url}/api/v1/namespaces/default/pods/bad/log") as r:
        assert r.status == 200
        assert "boom" in await r.text()


async def test_missing_command_fails_with_clear_message(cluster):
    store = cluster.store
    store.create("pods", pod("nope", ["no-such-binary-here"]), "default")
    done = await wait_for_pod(store, "default", "nope", phase_is("Failed"))
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "StartError" and term["exitCode"] == 128
    assert 'exec: "no-such-binary-here": executable file not found in $PATH' in term["message"]
    events, _ = store.list("events", "default", field_selector="involvedObject.name=nope,reason=Failed")
    assert events and events[0]["type"] == "Warning"


async def test_delete_kills_process_group_records_killing_and_removes(cluster):
    store = cluster.store
    # a child that ignores SIGTERM: only the group SIGKILL after the grace period ends it
    script = "import subprocess,sys,time;subprocess.Popen([sys.executable,'-c','import signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);time.sleep(60)']);time.sleep(60)"
    store.create("pods", pod("victim", [PY, "-c", script]), "default")
    await wait_for_pod(store, "default", "victim", phase_is("Running"))
    pid = cluster.kubelet.processes()[("default", "victim")]
    await wait_until(lambda: len(live_group_members(pid)) >= 2, 10, "the child to start")
    store.delete("pods", "default", "victim")
    assert store.get("pods", "default", "victim")["metadata"]["deletionTimestamp"]
    # grace 1 s, then SIGKILL; slack for a loaded machine
    await wait_until(lambda: not store.list("pods", "default", field_selector="metadata.name=victim")[0], 10, "the pod to go")
    # SIGKILL is sent before the pod goes; on a loaded machine the victim may take a moment to die
    await wait_until(lambda: live_group_members(pid) == [], 10, "the whole process group to die")
    events, _ = store.list("events", "default", field_selector="involvedObject.name=victim,reason=Killing")
    assert events[0]["message"] == "Stopping container main"


def test_jupyter_image_without_command_runs_singleuser():
    image = "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"
    assert container_argv({"image": image}) == ["jupyterhub-singleuser"]
    # args replace the image's default command, as KubeSpawner's `cmd` does
    assert container_argv({"image": image, "args": ["jupyterhub-singleuser", "--debug"]}) == ["jupyterhub-singleuser", "--debug"]
    assert container_argv({"image": image, "command": ["python3"], "args": ["-V"]}) == ["python3", "-V"]
    assert container_argv({"image": "busybox"}) == []


def test_field_ref_rejects_unknown_paths_and_pool_stays_in_loopback():
    with pytest.raises(ValueError, match="unsupported fieldRef"):
        resolve_field_ref({"metadata": {}}, "spec.bogus")
    with pytest.raises(ValueError, match="loopback"):
        AddressPool("10.0.0.0/16")
    pool = AddressPool("127.99.0.0/30")
    assert {pool.allocate(), pool.allocate()} == {"127.99.0.1", "127.99.0.2"}
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.allocate()
