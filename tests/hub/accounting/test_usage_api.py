"""The GPU usage API, CSV and counters on a real hub, through its proxy: admin-only, right figures."""

from __future__ import annotations

import csv
import io
import json
import re

import aiohttp
import pytest
import pytest_asyncio
from helpers.usage_hub import CONFIG

from jupyter_gpuburst.bench.hubproc import HubProcess

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def usage_hub(tmp_path_factory):
    hub = HubProcess(tmp_path_factory.mktemp("hub"), CONFIG)
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


async def get(hub, http, path: str, token: str | None = None):
    async with http.get(f"{hub.url}/services/gpuburst/{path}", headers=hub.headers(token)) as resp:
        return resp.status, resp.headers, await resp.text()


async def test_usage_by_user_and_donor(usage_hub, http):
    status, _, text = await get(usage_hub, http, "api/usage?period=week&by=user")
    assert status == 200, text
    report = json.loads(text)
    rows = {r["user"]: r for r in report["rows"]}
    assert rows["bob"]["gpu_hours"] == pytest.approx(6.0)
    assert rows["alice"]["gpu_hours"] == pytest.approx(4.0)
    assert "carol" not in rows  # Pending: never bound, never counted
    assert report["total"]["gpu_hours"] == pytest.approx(10.0)
    donor = {"site": "donor-1", "gpu_hours": pytest.approx(6.0), "idle_gpu_hours": None, "sessions": 1}
    bob_use = {"peak_gpu_memory_gib": 100.0, "peak_gpu_utilization": 0.97, "mean_gpu_utilization": 0.75}
    assert report["donors"] == [{**donor, **bob_use}]
    # what each one's GPUs used, as their servers reported it: for right-sizing
    assert {k: rows["alice"][k] for k in bob_use} == {"peak_gpu_memory_gib": 6.0, "peak_gpu_utilization": 0.3, "mean_gpu_utilization": 0.1}
    assert report["total"]["peak_gpu_memory_gib"] == 100.0
    assert report["counts_idle"] is False and report["period"]["kind"] == "week"


async def test_usage_csv_for_a_semester(usage_hub, http):
    status, headers, text = await get(usage_hub, http, "api/usage.csv?period=semester&date=Fall%202026")
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/csv")
    assert 'filename="gpu-usage-semester-Fall-2026.csv"' in headers["Content-Disposition"]
    lines = list(csv.DictReader(io.StringIO(text)))
    assert {(r["user"], r["site_kind"], r["gpu_hours"]) for r in lines} == {("alice", "origin", "4.0000"), ("bob", "donor", "6.0000")}
    peaks = {r["user"]: (r["peak_gpu_memory_gib"], r["peak_gpu_utilization"], r["mean_gpu_utilization"]) for r in lines}
    assert peaks == {"alice": ("6", "0.3", "0.1"), "bob": ("100", "0.97", "0.75")}


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("api/usage?period=semester&date=2026-07-01", "no semester contains 2026-07-01"),
        ("api/usage?period=fortnight", "unknown period 'fortnight'"),
        ("api/usage.csv?period=day&date=yesterday", "date must be YYYY-MM-DD"),
        ("api/usage?by=shoe_size", "cannot group GPU usage by shoe_size"),
    ],
)
async def test_a_period_that_does_not_exist_is_a_clear_400(usage_hub, http, query, said):
    status, _, text = await get(usage_hub, http, query)
    assert status == 400
    assert said in text


async def test_a_student_cannot_read_anyones_figures(usage_hub, http):
    await usage_hub.request(http, "POST", "/users/alice")
    status, body = await usage_hub.request(http, "POST", "/users/alice/tokens", json={"note": "t"})
    assert status == 201, body
    for path in ("api/usage?by=user", "api/usage.csv", "api/budgets"):
        status, _, text = await get(usage_hub, http, path, token=body["token"])
        assert status == 403, (path, text)
        assert "admins" in text and "bob" not in text


async def test_budgets_and_grants(usage_hub, http):
    status, _, text = await get(usage_hub, http, "api/budgets")
    assert status == 200, text
    users = {u["name"]: u for u in json.loads(text)["users"]}
    assert users["bob"]["left_hours"] == 0 and users["bob"]["hours"] == 5
    assert users["alice"]["sentence"].startswith("16 of 20 GPU-hours left this week, resets ")
    grant = {"Authorization": usage_hub.headers()["Authorization"]}
    for bad in ({"user": "bob", "hours": "lots"}, {"user": "bob", "hours": -3}, {"hours": 2}, {"user": "bob", "group": "x", "hours": 1}):
        async with http.post(f"{usage_hub.url}/services/gpuburst/api/budgets/grants", json=bad, headers=grant) as resp:
            assert resp.status == 400, bad
            assert "message" in await resp.json()
    async with http.post(
        f"{usage_hub.url}/services/gpuburst/api/budgets/grants", json={"user": "bob", "hours": 2.5}, headers=grant
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["budget"]["left_hours"] == pytest.approx(1.5)


async def test_counters_have_no_usernames(usage_hub, http):
    async with http.get(f"{usage_hub.url}/hub/metrics", headers=usage_hub.headers()) as resp:
        text = await resp.text()
    lines = [line for line in text.splitlines() if line.startswith("jupyterhub_gpuburst_gpu_seconds_total")]
    assert any('site="donor-1"' in line and line.endswith(" 21600.0") for line in lines), lines
    assert not any("alice" in line or "bob" in line for line in lines)


async def _page(hub, user: str) -> tuple[int, str]:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        async with session.get(f"{hub.url}/hub/login") as resp:
            page = await resp.text()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page)
        data = {"username": user, "password": "any", **({"_xsrf": xsrf.group(1)} if xsrf else {})}
        async with session.post(f"{hub.url}/hub/login", data=data, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
        async with session.get(f"{hub.url}/services/gpuburst/capacity") as resp:
            return resp.status, await resp.text()
    finally:
        await session.close()


async def test_the_capacity_page_shows_top_users_donors_and_budgets(usage_hub):
    status, html = await _page(usage_hub, "admin")
    assert status == 200, html[:500]
    top = re.search(r'<table class="table table-sm" id="gpuburst-top-users">(.*?)</table>', html, re.S).group(1)
    assert re.findall(r'data-user="([^"]+)"', top) == ["bob", "alice"]  # most GPU-hours first
    donors = re.search(r'id="gpuburst-donor-hours">(.*?)</table>', html, re.S).group(1)
    assert 'data-site="donor-1"' in donors and "6.00" in donors
    budgets = re.search(r'id="gpuburst-budgets">(.*?)</table>', html, re.S).group(1)
    alice = re.search(r'data-budget="user:alice"\s*>(.*?)</tr>', budgets, re.S).group(1)
    assert re.findall(r"<td>([^<]*)</td>", alice) == ["alice", "4.00", "20", "16.00"]
    assert "api/usage.csv?period=week" in html


async def test_the_capacity_page_lists_profiles_larger_than_their_sessions_need(usage_hub):
    status, html = await _page(usage_hub, "admin")
    assert status == 200, html[:500]
    table = re.search(r'id="gpuburst-right-sizing">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r'<tr data-profile="([^"]*)" data-resource="([^"]*)">(.*?)</tr>', table, re.S)
    # alice's 2 GPUs held 80 GiB and peaked at 6: listed; bob's used 100 of 120 GiB: not
    assert len(rows) == 1, table
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][2], re.S)]
    assert rows[0][1] == "nvidia.com/gpu"
    assert cells[1:] == ["2 × GPU (80 GiB)", "1", "6 / 6 GiB", "8%", "10% / 30%"], cells
