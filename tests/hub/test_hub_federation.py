"""After real spawns on the local federation, /hub/metrics and the capacity API tell the truth."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.spawn import hub_config
from jupyter_gpuburst.sim.testing import running_federation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

GPU = "nvidia.com/gpu"
PROFILES = """
c.KubeSpawner.profile_list = [
    {"display_name": "One GPU", "slug": "gpu1", "default": True,
     "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}}},
    {"display_name": "Four GPUs, origin only", "slug": "gpu4-local",
     "gpuburst": {"resource": "nvidia.com/gpu", "count": 4, "allowed_sites": ["origin"]}},
]
"""


async def scrape(hub: HubProcess, session: aiohttp.ClientSession) -> dict:
    async with session.get(f"{hub.url}/hub/metrics", headers=hub.headers()) as resp:
        assert resp.status == 200
        text = await resp.text()
    return {(s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def get(series: dict, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


async def eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_metrics_and_capacity_after_spawns(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(state_dir=tmp_path / "sim", kubeconfig=kubeconfig):
        hub = HubProcess(tmp_path / "hub", hub_config("gpuburst", 60, PROFILES), env={"KUBECONFIG": str(kubeconfig)})
        await hub.start()
        try:
            async with aiohttp.ClientSession() as http:
                users = ["ada", "bo", "cy", "dee"]
                status, _ = await hub.request(http, "POST", "/users", json={"usernames": users})
                assert status == 201
                # origin has 2 GPUs, donor-1 grants 8: two land locally, the third bursts
                for name in users[:3]:
                    status, body = await hub.request(http, "POST", f"/users/{name}/server", json={"profile": "gpu1"})
                    assert status == 201, (body, hub.log_tail())
                # four GPUs on the origin cannot be had anywhere: a fast, counted refusal
                status, body = await hub.request(http, "POST", "/users/dee/server", json={"profile": "gpu4-local"})
                assert status >= 400, body

                async def capacity_is_current():
                    series = await scrape(hub, http)
                    assert get(series, "jupyterhub_gpuburst_gpus_free", site="origin", resource=GPU) == 0
                    assert get(series, "jupyterhub_gpuburst_gpus_allocatable", site="origin", resource=GPU) == 2
                    assert get(series, "jupyterhub_gpuburst_gpus_free", site="donor-1", resource=GPU) == 7
                    assert get(series, "jupyterhub_gpuburst_gpus_allocatable", site="donor-1", resource=GPU) == 8
                    assert get(series, "jupyterhub_gpuburst_site_ready", site="donor-1", kind="donor") == 1
                    return series

                series = await eventually(capacity_is_current)
                assert get(series, "jupyterhub_gpuburst_spawns_total", site="origin", outcome="success") == 2
                assert get(series, "jupyterhub_gpuburst_spawns_total", site="donor-1", outcome="success") == 1
                refused = sum(
                    v
                    for (n, labels), v in series.items()
                    if n == "jupyterhub_gpuburst_spawns_total" and ("outcome", "no_capacity") in labels
                )
                assert refused == 1
                assert get(series, "jupyterhub_gpuburst_placement_decision_duration_seconds_count") >= 4
                assert get(series, "jupyterhub_gpuburst_spawn_queue_length") == 0
                redirects = sum(v for (n, _), v in series.items() if n == "jupyterhub_gpuburst_redirects_total")
                assert redirects == 0

                status, report = await hub.capacity(http)
                assert status == 200
                sites = {p["user"]: p["site"] for p in report["placements"]}
                assert sites == {"ada": "origin", "bo": "origin", "cy": "donor-1"}
                assert all(p["state"] == "running" for p in report["placements"])
                assert report["donors"] == [
                    {"site": "donor-1", "cluster_id": "donor-1", "ready": True, "nodes_present": 1, "nodes_eligible": 1}
                ]

                # the donor GPU comes back when its server stops
                status, _ = await hub.request(http, "DELETE", "/users/cy/server")
                assert status in (202, 204)

                async def donor_freed():
                    series = await scrape(hub, http)
                    assert get(series, "jupyterhub_gpuburst_gpus_free", site="donor-1", resource=GPU) == 8

                await eventually(donor_freed)
        finally:
            await hub.stop()
