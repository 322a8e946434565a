"""`gpuburst doctor` / `capacity` through the real kubernetes client against the API emulator."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers.doctor import gpu_pod, node
from hub_config.readme import apply_rbac_manifest

from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store

NSO = f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}"


@pytest.fixture
async def origin(tmp_path):
    """An emulated origin: 2 local GPUs (1 in use), donor-1's virtual node with 8, jhub offloaded."""
    store = Store()
    server = ApiServer(store)
    store.create("namespaces", {"metadata": {"name": "jhub"}})
    store.create("nodes", node("gpu-a", 2))
    store.create("nodes", node("liqo-donor-1", 8, donor="donor-1"))
    store.create("pods", gpu_pod("jupyter-old", "gpu-a", 1, namespace="jhub"), "jhub")
    store.create(NSO, liqo.namespace_offloading("jhub"), "jhub")
    await server.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"origin": server.url}, "origin", namespace="jhub")
    try:
        yield server, store, str(kubeconfig)
    finally:
        await server.stop()


async def run(func, *argv: str) -> int:
    # The kubernetes client is synchronous; the emulator serves on this loop meanwhile.
    return await asyncio.to_thread(func, list(argv))


async def test_healthy_origin_exits_zero(origin, capsys):
    _server, _store, kubeconfig = origin
    assert await run(doctor.main, "--kubeconfig", kubeconfig, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["namespace"] == "jhub" and report["context"] == "origin"
    assert {f["area"] for f in report["findings"]} == {
        "liqo",
        "origin",
        "donors",
        "rbac",
        "offloading",
        "reflection",
        "storage",
        "versions",
    }


async def test_capacity_prints_free_and_total_per_site(origin, capsys):
    _server, _store, kubeconfig = origin
    assert await run(doctor.capacity_main, "--kubeconfig", kubeconfig, "--context", "origin") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SITE", "KIND", "READY", "RESOURCE", "FREE/TOTAL"]
    assert [line.split() for line in lines[1:]] == [
        ["origin", "origin", "yes", "nvidia.com/gpu", "1/2"],
        ["donor-1", "donor", "yes", "nvidia.com/gpu", "8/8"],
    ]


async def test_notready_donor_exits_nonzero_and_names_the_fix(origin, capsys):
    _server, store, kubeconfig = origin
    notready = node("liqo-donor-1", 8, donor="donor-1", ready=False)["status"]
    store.mutate("nodes", None, "liqo-donor-1", lambda n: n.__setitem__("status", notready))
    assert await run(doctor.main, "--kubeconfig", kubeconfig) == 1
    out = capsys.readouterr().out
    assert "FAIL    donors" in out and "liqoctl info peer donor-1" in out


async def test_namespace_not_offloaded_warns_and_names_the_fix_as_the_spawner_offloads_it(origin, capsys):
    _server, store, kubeconfig = origin
    store.create("namespaces", {"metadata": {"name": "students"}})
    # the emulated identity may create NamespaceOffloadings: the spawner does it on first use
    assert await run(doctor.main, "--kubeconfig", kubeconfig, "-n", "students") == 0
    out = capsys.readouterr().out
    assert "WARN    offloading" in out and "not offloaded yet" in out and "liqoctl offload namespace students" in out


async def test_denied_access_review_exits_nonzero_with_a_grant(origin, capsys):
    server, _store, kubeconfig = origin
    server.denied.add(("create", liqo.OFFLOADING_GROUP, liqo.NAMESPACE_OFFLOADING_PLURAL))
    server.denied.add(("watch", "", "nodes"))
    assert await run(doctor.main, "--kubeconfig", kubeconfig, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    denied = {f["subject"]: f for f in report["findings"] if f["status"] == "fail"}
    assert set(denied) == {"nodes cluster-wide", f"{NSO} in jhub"}
    assert "kubectl create clusterrole gpuburst-nodes-all --verb=watch --resource=nodes" in denied["nodes cluster-wide"]["fix"]


async def test_unreachable_server_and_unknown_context_exit_two(tmp_path, capsys):
    dead = write_kubeconfig(tmp_path / "dead", {"gone": "http://127.0.0.1:9"}, "gone")
    assert await run(doctor.main, "--kubeconfig", str(dead)) == 2
    assert "gpuburst doctor: cannot" in capsys.readouterr().err
    assert await run(doctor.capacity_main, "--kubeconfig", str(dead), "--context", "nope") == 2
    assert "context 'nope' is not in" in capsys.readouterr().err


async def test_as_asks_every_question_as_the_hub_service_account(origin):
    _server, _store, kubeconfig = origin
    conn = doctor.connect(kubeconfig, impersonate="system:serviceaccount:jhub:hub", impersonate_group="system:serviceaccounts")
    headers = conn.cluster._api_client.default_headers
    assert headers["Impersonate-User"] == "system:serviceaccount:jhub:hub"
    assert headers["Impersonate-Group"] == "system:serviceaccounts"
    assert conn.namespace == "jhub" and conn.server.startswith("http://127.0.0.1:")


async def test_as_the_hub_without_its_grant_names_what_is_missing_and_with_it_passes(origin, capsys):
    # RBAC decides for an impersonated identity, as on a cluster: first nothing is granted
    _server, store, kubeconfig = origin
    as_hub = ("--kubeconfig", kubeconfig, "--as", "system:serviceaccount:jhub:hub", "--json")
    assert await run(doctor.main, *as_hub) == 1
    report = json.loads(capsys.readouterr().out)
    failed = {f["subject"] for f in report["findings"] if f["status"] == "fail"}
    assert {"nodes cluster-wide", "pods cluster-wide", "pods in jhub", f"{NSO} in jhub"} <= failed
    skipped = {f["subject"]: f for f in report["findings"] if f["detail"].startswith("not checked")}
    assert skipped["GPU nodes and donors"]["detail"] == "not checked: this identity may not list nodes (see the permissions below)"
    assert report["capacity"] is None

    # the README's rbac.yaml, as `kubectl apply -n jhub -f` stores it
    apply_rbac_manifest(store, "jhub")
    assert await run(doctor.main, *as_hub) == 0
    report = json.loads(capsys.readouterr().out)
    assert not [f for f in report["findings"] if f["status"] == "fail"]
    sites = {site["site"]: site for site in report["capacity"]["sites"]}
    assert sites["donor-1"]["resources"]["nvidia.com/gpu"]["free"] == 8
    # the hub needs no storage classes: only the cluster's admin sees them
    [storage] = [f for f in report["findings"] if f["area"] == "storage"]
    assert storage["status"] == "warn" and "may not list storage classes" in storage["detail"]


async def test_as_group_without_as_is_refused(origin, capsys):
    _server, _store, kubeconfig = origin
    assert await run(doctor.main, "--kubeconfig", kubeconfig, "--as-group", "admins") == 2
    assert "--as-group needs --as" in capsys.readouterr().err
