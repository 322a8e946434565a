"""/hub/metrics serves the gpuburst series from JupyterHub's own registry."""

from __future__ import annotations

import pytest
from helpers.fakes import GPU, StaticTracker
from prometheus_client.parser import text_string_to_metric_families

from jupyter_gpuburst.hub import metrics

pytestmark = pytest.mark.asyncio(loop_scope="module")


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(series: dict, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


async def scrape(hub, http) -> dict:
    async with http.get(f"{hub.url}/hub/metrics", headers=hub.headers()) as resp:
        assert resp.status == 200
        return samples(await resp.text())


async def test_metrics_need_the_read_metrics_scope(static_hub, http):
    async with http.get(f"{static_hub.url}/hub/metrics") as resp:
        assert resp.status == 403


async def test_capacity_gauges_follow_the_inventory(static_hub, http):
    series = await scrape(static_hub, http)
    snapshot = StaticTracker().snapshot()
    for name, site in snapshot.sites.items():
        for resource in site.allocatable:
            assert value(series, "jupyterhub_gpuburst_gpus_free", site=name, resource=resource) == site.free.get(resource, 0)
            assert value(series, "jupyterhub_gpuburst_gpus_allocatable", site=name, resource=resource) == site.allocatable[resource]
    assert value(series, "jupyterhub_gpuburst_gpus_free", site="origin", resource=GPU) == 3
    assert value(series, "jupyterhub_gpuburst_site_ready", site="donor-1", kind="donor") == 1
    assert value(series, "jupyterhub_gpuburst_site_ready", site="donor-2", kind="donor") == 0


async def test_spawn_series_exist_before_any_spawn(static_hub, http):
    series = await scrape(static_hub, http)
    for outcome in metrics.SPAWN_OUTCOMES:
        assert value(series, "jupyterhub_gpuburst_spawns_total", site="origin", outcome=outcome) == 0
    assert value(series, "jupyterhub_gpuburst_spawn_queue_length") == 0
    assert value(series, "jupyterhub_gpuburst_placement_decision_duration_seconds_count") == 0
    # JupyterHub's own series are served by the same handler
    assert any(name == "jupyterhub_total_users" for name, _ in series)
