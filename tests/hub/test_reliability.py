"""A real hub under API faults, crashes and bad input (the chaos benchmark: benchmarks/README.md)."""

from __future__ import annotations

import argparse
import asyncio
import json

import aiohttp
import pytest

from jupyter_gpuburst.bench import chaos
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.spawn import NAMESPACE, clear_pods, federation_config, hub_config
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.testing import running_federation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

OPTIONS_PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {
        "display_name": "One GPU",
        "slug": "gpu1",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {"base": {"display_name": "Base", "kubespawner_override": {"image": "gpuburst/bench-standin:1"}}},
                "unlisted_choice": {
                    "enabled": True,
                    "validation_regex": "^gpuburst/.+:.+$",
                    "kubespawner_override": {"image": "{value}"},
                },
            }
        },
    },
]


async def spawn_many(hub: HubProcess, session: aiohttp.ClientSession, users: list[str]) -> list[tuple[int, str]]:
    async def one(user: str) -> tuple[int, str]:
        status, body = await hub.request(session, "POST", f"/users/{user}/server", json={"profile": "gpu1"})
        return status, (body.get("message") if isinstance(body, dict) else str(body or ""))

    return list(await asyncio.gather(*(one(u) for u in users)))


def judged(outcomes: list[tuple[int, str]]) -> tuple[int, int, list[str]]:
    ready = sum(1 for status, _ in outcomes if status == 201)
    clear = sum(1 for status, message in outcomes if status != 201 and chaos.is_clear(message))
    unclear = [message[:200] for status, message in outcomes if status != 201 and not chaos.is_clear(message)]
    return ready, clear, unclear


async def test_a_quarter_of_api_requests_failing_cold_and_warm(tmp_path):
    """25 % of the origin's API requests answer 429 or 500, from before the hub starts (cold:
    its first lists, KubeSpawner's reflectors) and on a hub already running (warm)."""
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(federation_config(4, 16, 12), state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        faults = fed.origin.api.faults
        faults.error_rate_429, faults.error_rate_500 = 0.125, 0.125
        hub = HubProcess(tmp_path / "hub", hub_config("gpuburst", 120), env={"KUBECONFIG": str(kubeconfig)})
        await hub.start()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
                users = [f"u{i}" for i in range(12)]
                status, _ = await hub.request(session, "POST", "/users", json={"usernames": users})
                assert status == 201
                served_before = sum(fed.origin.api.stats.values())
                cold = await spawn_many(hub, session, users[:6])
                warm = await spawn_many(hub, session, users[6:])
        finally:
            await hub.stop()
            await clear_pods(fed, timeout=60)
        log = hub.log_tail(2_000_000)
    assert sum(fed.origin.api.stats.values()) > served_before  # the faults were in the path
    for outcomes in (cold, warm):
        ready, clear, unclear = judged(outcomes)
        assert unclear == [], unclear
        assert ready + clear >= 0.99 * len(outcomes)
        assert ready >= len(outcomes) // 2  # retries, not refusals, carry most spawns through
    assert "Retrying" in log  # the hub did meet the faults
    assert "HTTP response headers" not in log and "CIMultiDict" not in log


async def test_refused_options_do_not_stick_and_unlisted_choices_work(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    extra = f"c.KubeSpawner.profile_list = {OPTIONS_PROFILES!r}"
    async with running_federation(federation_config(2, 0, 2), state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        hub = HubProcess(tmp_path / "hub", hub_config("gpuburst", 120, extra), env={"KUBECONFIG": str(kubeconfig)})
        await hub.start()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
                await hub.request(session, "POST", "/users", json={"usernames": ["ann", "bob"]})
                huge = "x" * 1_000_000
                status, body = await hub.request(session, "POST", "/users/ann/server", json={"profile": huge})
                assert status == 400
                assert len(body["message"]) < 400 and "…" in body["message"]
                assert fed.origin.store.list("pods", NAMESPACE)[0] == []
                # the refused options were not kept: a plain start uses the last good ones (none)
                status, body = await hub.request(session, "POST", "/users/ann/server")
                assert status == 201, body
                status, model = await hub.request(session, "GET", "/users/ann")
                assert model["servers"][""]["user_options"] == {}

                # KubeSpawner's form: "Other..." picked, a value typed that the regex allows
                options = {"profile": "gpu1", "image": "unlisted-choice", "image--unlisted-choice": "gpuburst/bench-standin:2"}
                status, body = await hub.request(session, "POST", "/users/bob/server", json=options)
                assert status == 201, body
                pod = fed.origin.store.get("pods", NAMESPACE, "jupyter-bob")
                assert pod["spec"]["containers"][0]["image"] == "gpuburst/bench-standin:2"
                assert pod["metadata"]["labels"][keys.SITE_LABEL] == "origin"
                status, _ = await hub.request(session, "DELETE", "/users/bob/server")
                assert status in (202, 204)
                bad = {**options, "image--unlisted-choice": "evil/miner:1"}
                status, body = await hub.request(session, "POST", "/users/bob/server", json=bad)
                assert status == 400 and "image" in body["message"]
                await asyncio.sleep(1)
                status, model = await hub.request(session, "GET", "/users/bob")
                assert model["servers"] == {} or "" not in model["servers"]
        finally:
            await hub.stop()
            await clear_pods(fed, timeout=60)
        log = hub.log_tail(5_000_000)
    assert huge not in log and "x" * 200 not in log


async def test_chaos_benchmark_short(tmp_path):
    """Faults of every kind, the hub killed twice: nothing lost, duplicated, orphaned or leaked,
    GPU kernels of students with a CPU server included."""
    args = argparse.Namespace(
        spawns=12, kernel_students=2, local_gpus=None, donor_gpus=None, span=45.0, attempts=4, start_timeout=90, seed=3, pools=True
    )
    result = await chaos.run(args, tmp_path)
    # whole, in the report of a failure (an assertion's own message is cut short)
    print(json.dumps(result, indent=1, default=str))
    assert result["hub_restarts"] == 2
    faults = {f.split()[1] for f in result["faults"]}
    assert {"api_down", "peering_lost", "watch_gone", "watch_drop", "errors", "pools_preempted"} <= faults
    # warm pools up throughout: the hub killed with them, the donor lost with its pool
    assert [p["site"] for p in result["pools"]] == ["origin", "donor-1"]
    assert result["placeholders_bound"] > 0 and result["fault_free_placeholders_bound"] > 0, result
    assert result["lost"] == result["duplicated"] == result["orphaned"] == 0, result
    assert result["leaked_reservations"] == result["leaked_placeholders"] == result["wrong_placement"] == 0, result
    # two of the twelve pressed Cancel while being placed, and nothing of theirs is left; the
    # two kernel students' CPU servers are servers like the others
    assert result["cancelled"] == 2 and result["ready"] + result["refused"] == 12, result
    assert result["fault_free_ready"] == 14
    assert result["checks"] == chaos.checks(result, 14)
    # each kernel student's GPU kernel ran on the donor, or they read why not; each that ran
    # still runs in the pod it ran in, and no start the hub made is left behind
    kernels = result["kernels"]
    assert kernels["ran"] + kernels["refused"] == 2 and kernels["lost"] == kernels["duplicated"] == kernels["orphaned"] == 0, kernels
    assert result["fault_free_kernels"]["ran"] == result["fault_free_kernels"]["on_donor"] == 2, result["fault_free_kernels"]
    # GPU-hours: each pod's ledger entry within 5 s of its real life (bench/ledger_check.py), the hub killed or not, the
    # placeholders preempted while a restarted hub's watch was still coming back included
    ledger = result["ledger"]
    assert ledger["pods"] > 0 and ledger["missing"] == 0 and ledger["off_by_more"] == 0, json.dumps(ledger)
    assert result["ok"] is True, result["checks"]


def test_counting_sees_what_the_hub_does_not_know(tmp_path):
    """The counts can fail: an orphan, a duplicate and a lost server are each found."""
    from types import SimpleNamespace

    def pod(user, name, phase="Running"):
        return {
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"component": "singleuser-server", chaos.USER_LABEL: user, keys.SITE_LABEL: "origin"},
            },
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    class Store:
        def __init__(self, pods):
            self.pods = pods

        def list(self, rtype, namespace=None):
            return list(self.pods), "1"

    origin = SimpleNamespace(store=Store([pod("ann", "jupyter-ann"), pod("ann", "jupyter-ann-2"), pod("eve", "jupyter-eve")]))
    fed = SimpleNamespace(origin=origin, donors={}, peerings={}, clusters={"origin": origin})
    by_user, extra, donor_orphans = chaos.user_pods(fed)
    assert len(by_user["ann"]) == 2 and extra == 0 and donor_orphans == 0


def test_a_lost_students_detail_carries_the_hubs_complaints_about_them():
    log = [
        "[I 12:00 JupyterHub base:1] User storm002 took 2 seconds to start",
        "[E 12:01 JupyterHub web:2] Uncaught exception POST /hub/api/users/storm002/server",
        "[W 12:02 JupyterHub users:3] Interrupting spawner storm0021, pending spawn",
        "[E 12:03 JupyterHub web:2] Uncaught exception POST /hub/api/users/storm003/server " + "x" * 400,
    ]
    assert chaos.complaints_about(log, "storm003") == [log[3][:240]]
    assert chaos.complaints_about(log, "storm002") == [log[1]]  # not storm0021's
    assert chaos.complaints_about(log, "nobody") == []


def test_a_clear_reason_is_short_and_says_something():
    assert chaos.is_clear("The cluster is busy; try again in a minute.")
    assert not chaos.is_clear("Internal Server Error")
    assert not chaos.is_clear("")
    assert not chaos.is_clear("Cannot start on donor donor-1: (429)\nReason: Too Many Requests\nHTTP response headers: <CIMultiDictProxy(")
    assert not chaos.is_clear("x" * 301)


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"lost": 1, "ready": 9}, "none_lost"),
        ({"duplicated": 1}, "none_duplicated"),
        ({"orphaned": 1}, "none_orphaned"),
        ({"leaked_reservations": 1}, "no_leaked_reservation"),
        ({"wrong_placement": 1}, "none_on_a_site_its_placement_does_not_name"),
        ({"ready": 8}, "every_student_ready_or_refused"),
        ({"leaked_placeholders": 1}, "no_leaked_placeholder"),
        ({"ledger": {"off_by_more": 1, "pods": 12}}, "ledger_matches_pod_lifetimes"),
        ({"ledger": {"off_by_more": 0, "pods": 0}}, "ledger_matches_pod_lifetimes"),
        ({"kernels": {"students": 2, "ran": 1, "refused": 0, "lost": 1}}, "no_gpu_kernel_lost"),
        ({"kernels": {"students": 2, "ran": 1, "refused": 0, "lost": 1}}, "every_kernel_student_ran_or_refused"),
        ({"kernels": {"students": 2, "ran": 2, "refused": 0, "orphaned": 1}}, "no_gpu_kernel_duplicated_or_orphaned"),
        ({"kernels": {"students": 2, "ran": 2, "refused": 0, "duplicated": 1}}, "no_gpu_kernel_duplicated_or_orphaned"),
    ],
)
def test_each_chaos_check_fails_on_its_count(change, check):
    good = {"ready": 10, "refused": 0, "cancelled": 2, "lost": 0, "duplicated": 0, "orphaned": 0, "leaked_reservations": 0}
    good |= {"leaked_placeholders": 0, "wrong_placement": 0}
    good["ledger"] = {"off_by_more": 0, "pods": 12}
    good["kernels"] = {"students": 2, "ran": 1, "refused": 1, "lost": 0, "duplicated": 0, "orphaned": 0}
    assert all(chaos.checks(good, 12).values())
    failed = chaos.checks({**good, **change}, 12)
    assert failed[check] is False


def test_placeholders_of_no_configured_pool_are_orphaned_and_beyond_its_size_leaked():
    from types import SimpleNamespace

    from jupyter_gpuburst.bench import chaos_pools

    def placeholder(name, pool, deleting=False):
        meta = {"name": name, "namespace": NAMESPACE, "labels": {keys.POOL_LABEL: pool}}
        if deleting:
            meta["deletionTimestamp"] = "2026-11-27T07:00:00Z"
        return {"metadata": meta, "status": {"phase": "Running"}}

    class Store:
        def __init__(self, pods):
            self.pods = pods

        def list(self, rtype, namespace=None, label_selector=None):
            return list(self.pods), "1"

    pools = [{"site": "origin", "profile": "gpu1", "count": 1}]
    pods = [placeholder("a", "origin.gpu1"), placeholder("b", "origin.gpu1", deleting=True)]
    fed = SimpleNamespace(origin=SimpleNamespace(store=Store(pods)), donors={}, peerings={})
    assert chaos_pools.placeholder_counts(fed, pools) == {"placeholders": 1, "orphaned": 0, "leaked": 0}
    pods += [placeholder("c", "origin.gpu1"), placeholder("d", "origin.mig")]
    assert chaos_pools.placeholder_counts(fed, pools) == {"placeholders": 3, "orphaned": 1, "leaked": 1}
