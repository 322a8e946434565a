"""`gpuburst bench chaos --control-plane kube`: the same students and checks on real control
planes, with real faults: the origin's etcd killed 8 s, its kube-apiserver restarted mid-spawn,
the donor's whole control plane lost with servers and GPU kernels running there, the hub killed."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from jupyter_gpuburst.bench import chaos
from jupyter_gpuburst.sim.kube import binaries

pytestmark = pytest.mark.kube


@pytest.mark.timeout(900)
async def test_chaos_on_real_control_planes(tmp_path):
    if not binaries.available():
        pytest.skip("the real control plane is not built here (`make kube`)")
    args = argparse.Namespace(
        spawns=8,
        kernel_students=2,
        local_gpus=None,
        donor_gpus=None,
        span=45.0,
        attempts=4,
        start_timeout=120,
        seed=3,
        pools=False,
        control_plane="kube",
    )
    result = await chaos.run(args, tmp_path)
    print(json.dumps(result, indent=1, default=str))  # whole, in a failure's report
    assert result["control_plane"] == "kube"
    kinds = [f.split()[1] for f in result["faults"]]
    assert kinds == ["etcd_down", "apiserver_restart", "hub_kill", "donor_control_plane_lost"], kinds
    done = {note["fault"]: note for note in result["kube_faults"]}
    assert done["etcd_down"]["down_s"] >= 8.0
    # the donor went with servers and GPU kernels on it: what it held must have come through
    assert done["donor_control_plane_lost"]["servers_running_there"] > 0, done
    assert done["donor_control_plane_lost"]["gpu_kernels_running_there"] > 0, done
    kernels = result["kernels"]
    assert kernels["ran"] + kernels["refused"] == 2 and kernels["ran"] > 0, kernels
    assert kernels["lost"] == kernels["duplicated"] == kernels["orphaned"] == 0, kernels
    assert result["hub_restarts"] == 1
    assert result["lost"] == result["duplicated"] == result["orphaned"] == 0, result
    assert result["leaked_reservations"] == result["wrong_placement"] == 0, result
    # the kernel students' CPU servers are servers like the others
    assert result["ready"] + result["refused"] == 10 and result["fault_free_ready"] == 10, result
    ledger = result["ledger"]
    assert ledger["pods"] > 0 and ledger["missing"] == 0 and ledger["off_by_more"] == 0, ledger
    assert all(result["checks"].values()), result["checks"]


async def test_node_agents_cache_and_writes_survive_etcd_and_apiserver_restarts(tmp_path):
    """The informer resumes (or lists again) once the API server is back, a write queued while
    etcd is down lands once it is back, and a blocking call meanwhile is a 503 ``ApiError``."""
    if not binaries.available():
        pytest.skip("the real control plane is not built here (`make kube`)")
    from jupyter_gpuburst.sim.errors import ApiError
    from jupyter_gpuburst.sim.kube.controlplane import ControlPlane
    from jupyter_gpuburst.sim.kube.remotestore import RemoteStore
    from jupyter_gpuburst.sim.testing import wait_until

    def configmap(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"v": "1"}}

    async with ControlPlane("chaos", tmp_path) as cp:
        store = RemoteStore(cp.url, (str(cp.pki.ca), str(cp.harness_cert.cert), str(cp.harness_cert.key)), ("configmaps",))
        await store.start()
        try:
            store.create("configmaps", configmap("before"))
            await wait_until(lambda: store.exists("configmaps", "default", "before"), timeout=30, what="the cache")

            await cp.kill_process("kube-apiserver")
            with pytest.raises(ApiError) as away:
                store.create("configmaps", configmap("refused"))
            assert away.value.code == 503 and "not reachable" in away.value.message
            await cp.start_process("kube-apiserver")
            store.create("configmaps", configmap("after-restart"))
            await wait_until(lambda: store.exists("configmaps", "default", "after-restart"), timeout=60, what="the watch resumed")

            await cp.kill_process("etcd")
            store.mutate("configmaps", "default", "before", lambda cm: cm["data"].update(v="2"))
            await asyncio.sleep(8.0)  # the writer meets an API server without its storage meanwhile
            await cp.start_process("etcd")
            await wait_until(lambda: _server_value(store, "before") == "2", timeout=90, what="the queued write landed")
            store.create("configmaps", configmap("after-etcd"))
            await wait_until(lambda: store.exists("configmaps", "default", "after-etcd"), timeout=60, what="the watch after etcd")
            # a component that never existed, or one stopped, is refused by name
            with pytest.raises(ValueError, match="no component"):
                await cp.kill_process("kubelet")
        finally:
            await store.stop()


def _server_value(store, name: str) -> str | None:
    from jupyter_gpuburst.sim.errors import ApiError

    try:
        return store._call("GET", f"{store.url}/api/v1/namespaces/default/configmaps/{name}").json()["data"]["v"]
    except (ApiError, KeyError, ValueError):
        return None
