"""The kubelet keeps a running pod's Secret volumes in step with their Secrets: an optional
Secret that appears after the pod started gets its files once the pod is synced (an update to
the pod syncs it, and so does the kubelet's periodic sync), as a real kubelet's secret manager
and volume manager do."""

from __future__ import annotations

import base64
import sys

import pytest

from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod, wait_until

PY = sys.executable
# waits for the file, prints it, and exits: what a pre-started kernel's entry point does
WAIT = (
    "import os,sys,time\n"
    "d=os.environ['DIR']\n"
    "print('started', sorted(os.listdir(d)), flush=True)\n"
    "while not os.path.exists(os.path.join(d,'key')): time.sleep(0.02)\n"
    "print('got', open(os.path.join(d,'key')).read(), flush=True)\n"
)


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 14) as c:
        yield c


def waiting_pod(name: str, secret: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "python:3.11",
                    "command": [PY, "-c", WAIT],
                    "env": [{"name": "DIR", "value": "/var/run/conn"}],
                    "volumeMounts": [{"name": "conn", "mountPath": "/var/run/conn", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "conn", "secret": {"secretName": secret, "optional": True, "defaultMode": 0o400}}],
        },
    }


def logged(cluster, name: str) -> str:
    path = cluster.kubelet.log_path("default", name)
    return path.read_text() if path is not None else ""


def secret(name: str, value: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"key": base64.b64encode(value.encode()).decode()}}


async def test_an_optional_secret_that_appears_later_fills_the_volume_when_the_pod_is_updated(cluster):
    store = cluster.store
    store.create("pods", waiting_pod("waiter", "later"), "default")
    # the missing optional Secret does not hold the pod back: it runs with an empty volume
    await wait_for_pod(store, "default", "waiter", lambda p: p["status"].get("phase") == "Running")
    await wait_for_pod(store, "default", "waiter", lambda p: "started []" in logged(cluster, "waiter"))
    events, _ = store.list("events", "default", field_selector="involvedObject.name=waiter")
    assert "FailedMount" not in {e["reason"] for e in events}

    store.create("secrets", secret("later", "s3cret"), "default")
    # the pod is updated (as the hub relabels an adopted kernel): the kubelet syncs its volumes
    store.mutate("pods", "default", "waiter", lambda p: p["metadata"].setdefault("labels", {}).update(adopted="yes"))
    done = await wait_for_pod(store, "default", "waiter", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), timeout=10)
    assert done["status"]["phase"] == "Succeeded", logged(cluster, "waiter")
    assert "got s3cret" in logged(cluster, "waiter")


async def test_a_status_write_alone_does_not_sync_and_a_changed_secret_replaces_the_file(cluster):
    store = cluster.store
    store.create("secrets", secret("conn", "first"), "default")
    body = waiting_pod("reader", "conn")
    # prints the key whenever it changes, until it reads "second"
    body["spec"]["containers"][0]["command"] = [
        PY,
        "-c",
        "import os,time\np=os.path.join(os.environ['DIR'],'key');last=None\n"
        "while last!='second':\n  v=open(p).read()\n  if v!=last: print('read',v,flush=True); last=v\n  time.sleep(0.02)\n",
    ]
    store.create("pods", body, "default")
    # the container's first line can come before the kubelet's write of the Running phase
    await wait_for_pod(store, "default", "reader", lambda p: p["status"].get("phase") == "Running")
    await wait_for_pod(store, "default", "reader", lambda p: "read first" in logged(cluster, "reader"))
    store.mutate("secrets", "default", "conn", lambda s: s.update(secret("conn", "second")))
    # nothing syncs the pod yet: its file is as it was
    status_only = store.mutate("pods", "default", "reader", lambda p: p["status"].update(message="status only"))
    assert status_only["status"]["message"] == "status only"
    running = store.get("pods", "default", "reader")
    assert running["status"]["phase"] == "Running" and "read second" not in logged(cluster, "reader")
    store.mutate("pods", "default", "reader", lambda p: p["metadata"].setdefault("annotations", {}).update(note="sync"))
    done = await wait_for_pod(store, "default", "reader", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), timeout=10)
    assert done["status"]["phase"] == "Succeeded" and "read second" in logged(cluster, "reader")


async def test_a_secret_that_comes_after_the_pods_update_fills_the_volume_at_the_periodic_sync(tmp_path):
    """Liqo reflects a Secret and a pod's update apart: on a donor the adopted kernel's update can
    come first, and its sync finds no Secret. The kubelet's periodic sync (--sync-frequency)
    fills the volume then, as a real kubelet's does; without it the kernel waited for ever."""
    async with one_node_cluster(tmp_path, 15, sync_frequency_s=0.5) as cluster:
        store = cluster.store
        store.create("pods", waiting_pod("late", "after-update"), "default")
        await wait_for_pod(store, "default", "late", lambda p: "started []" in logged(cluster, "late"))
        store.mutate("pods", "default", "late", lambda p: p["metadata"].setdefault("labels", {}).update(adopted="yes"))
        # the kubelet has synced the update (found no Secret) before the Secret comes
        synced = lambda: (cluster.kubelet._pods[("default", "late")].pod["metadata"].get("labels") or {}).get("adopted") == "yes"  # noqa: E731
        await wait_until(synced, timeout=10, what="the kubelet's sync of the update")
        store.create("secrets", secret("after-update", "late-key"), "default")
        done = await wait_for_pod(store, "default", "late", lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), timeout=10)
        assert done["status"]["phase"] == "Succeeded" and "got late-key" in logged(cluster, "late"), logged(cluster, "late")
