"""The capacity service on a real hub, through its proxy: admin-only, correct numbers, no secrets,
and no deprecation warning (it is a JupyterHub service, not ``extra_handlers``)."""

from __future__ import annotations

import re

import aiohttp
import pytest
from helpers.fakes import GPU, StaticTracker
from helpers.static_hub import STATIC_HUB_CONFIG

from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.core.inventory import summarize

pytestmark = pytest.mark.asyncio(loop_scope="module")


def service_api(hub) -> str:
    return f"{hub.url}/services/gpuburst/api/capacity"


async def get_report(hub, http, token: str | None = None) -> tuple[int, object]:
    async with http.get(service_api(hub), headers=hub.headers(token)) as resp:
        text = await resp.text()
        return resp.status, (await resp.json(content_type=None)) if resp.status == 200 else text


async def _user_token(hub, http, name: str) -> str:
    status, _ = await hub.request(http, "POST", f"/users/{name}")
    assert status in (201, 409)
    status, body = await hub.request(http, "POST", f"/users/{name}/tokens", json={"note": "test"})
    assert status == 201, body
    return body["token"]


async def test_capacity_api_refuses_without_credentials(static_hub, http):
    async with http.get(service_api(static_hub), allow_redirects=False) as resp:
        assert resp.status == 403
        body = await resp.text()
    assert '"sites"' not in body


async def test_capacity_api_refuses_non_admin_user(static_hub, http):
    token = await _user_token(static_hub, http, "student")
    status, body = await get_report(static_hub, http, token)
    assert status == 403
    assert "sites" not in body and "placements" not in body
    # the same token works for the user's own model: the 403 is about admin rights
    status, _ = await static_hub.request(http, "GET", "/user", token=token)
    assert status == 200


async def test_capacity_api_reports_the_inventory(static_hub, http):
    status, report = await get_report(static_hub, http)
    assert status == 200, report
    expected = summarize(StaticTracker().snapshot())
    sites = {s["site"]: s for s in report["sites"]}
    assert set(sites) == {"origin", "donor-1", "donor-2"}
    assert set(expected) <= set(sites)
    for name, resources in expected.items():
        for resource, numbers in resources.items():
            got = sites[name]["resources"][resource]
            assert got["free"] == numbers["free"], (name, resource)
            assert got["allocatable"] == numbers["allocatable"], (name, resource)
    # hand-checked: origin 6 GPUs, alice holds 2, another team's job 1
    assert sites["origin"]["resources"][GPU] == {"allocatable": 6, "requested": 3, "free": 3}
    assert sites["donor-1"]["resources"][GPU]["free"] == 5
    assert report["sites"][0]["site"] == "origin"
    # a donor whose peering is down offers nothing until it is back
    assert sites["donor-2"]["resources"].get(GPU, {"free": 0})["free"] == 0
    assert report["totals"][GPU]["allocatable"] == 6 + 8
    donors = {d["site"]: d["ready"] for d in report["donors"]}
    assert donors == {"donor-1": True, "donor-2": False}
    assert report["queue_length"] == 2
    servers = {p["server"]: p for p in report["placements"]}
    assert set(servers) == {"alice/", "bob/", "carol/"}
    assert servers["bob/"]["site"] == "donor-1" and servers["bob/"]["user"] == "bob"
    assert servers["carol/"]["state"] == "pending"
    assert "pod_spec" not in servers["alice/"]


async def test_capacity_api_leaks_no_secret(static_hub, http):
    async with http.get(service_api(static_hub), headers=static_hub.headers()) as resp:
        text = await resp.text()
    assert resp.status == 200
    assert "tok-do-not-leak" not in text
    assert static_hub.token not in text


async def _login(hub, name: str) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(f"{hub.url}/hub/login") as resp:
        page = await resp.text()
    xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page)
    data = {"username": name, "password": "any"}
    if xsrf:
        data["_xsrf"] = xsrf.group(1)
    async with session.post(f"{hub.url}/hub/login", data=data, allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
    return session


async def capacity_page(hub, user: str) -> tuple[int, str]:
    """What ``user``'s browser gets at the capacity page, once logged in."""
    session = await _login(hub, user)
    try:
        async with session.get(f"{hub.url}/services/gpuburst/capacity") as resp:
            return resp.status, await resp.text()
    finally:
        await session.close()


async def test_capacity_page_renders_for_admin(static_hub):
    status, html = await capacity_page(static_hub, "admin")
    assert status == 200
    assert "GPU capacity" in html
    row = re.search(r'<tr data-site="donor-1" data-resource="nvidia.com/gpu">(.*?)</tr>', html, re.S)
    assert row, html[:2000]
    assert re.search(r'class="gpuburst-free">5<', row.group(1))
    assert re.search(r'class="gpuburst-total">8<', row.group(1))
    assert re.search(r"<td>GPU <code[^>]*>nvidia.com/gpu</code></td>", row.group(1))  # friendly name, raw as detail
    assert 'data-server="bob/"' in html
    assert "not ready" in html  # donor-2
    assert "tok-do-not-leak" not in html


async def test_capacity_page_forbidden_for_student(static_hub, http):
    status, html = await capacity_page(static_hub, "student2")
    assert status == 403
    assert "data-site" not in html
    # the service's own address leads to the page (and answers the hub's health check)
    async with http.get(f"{static_hub.url}/services/gpuburst/", allow_redirects=False) as resp:
        assert resp.status == 302 and resp.headers["Location"] == "/services/gpuburst/capacity"


async def test_a_student_who_may_reach_the_service_is_told_the_page_is_the_admins(static_hub):
    """GPU kernels give students access to the service; its capacity page stays the admins'."""
    status, html = await capacity_page(static_hub, "kernelstudent")
    assert status == 403
    assert "data-site" not in html
    # a page like the hub's, which says why and leads back home
    assert '<div class="container" id="gpuburst-error" data-status="403">' in html
    assert "GPU capacity is for the hub&#39;s admins" in html and 'href="/hub/home"' in html
    assert "static/css/style.min.css" in html


async def test_the_service_logs_its_successes_at_debug_and_its_failures_as_warnings(static_hub, http):
    status, _ = await get_report(static_hub, http)
    assert status == 200
    status, _ = await get_report(static_hub, http, token="not-a-token")
    assert status == 403
    log = static_hub.log_tail(200_000)
    assert not re.search(r"\[I [^\]]*\] 200 GET /services/gpuburst/api/capacity", log)
    assert re.search(r"\[W [^\]]*\] 403 GET /services/gpuburst/api/capacity \(", log)


async def test_no_deprecation_warning_and_the_service_is_registered(static_hub, http):
    log = static_hub.log_tail(200_000)
    assert "extra_handlers is deprecated" not in log
    assert re.search(r"Adding external service gpuburst at http://127\.0\.0\.1:\d+", log)
    assert "Adding service gpuburst to proxy /services/gpuburst/" in log


async def test_the_service_follows_the_hubs_base_url(tmp_path, http):
    hub = HubProcess(tmp_path / "hub", STATIC_HUB_CONFIG, base_url="/jhub/")
    await hub.start()
    try:
        assert hub.url.endswith("/jhub")
        # HubProcess.start returns once the proxy routes the service
        async with http.get(service_api(hub), headers=hub.headers()) as resp:
            assert resp.status == 200, await resp.text()
            assert "sites" in await resp.json()
        session = await _login(hub, "admin")
        try:
            async with session.get(f"{hub.url}/services/gpuburst/capacity") as resp:
                assert resp.status == 200
                assert "GPU capacity" in await resp.text()
        finally:
            await session.close()
        assert "Adding service gpuburst to proxy /jhub/services/gpuburst/" in hub.log_tail(200_000)
    finally:
        await hub.stop()
