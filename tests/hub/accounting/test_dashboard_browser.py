"""The capacity page's GPU-hours in chromium, behind a real hub: light and dark, as admins see it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import save_docs_screenshot
from helpers.hubsite import LoopThread
from helpers.usage_hub import CONFIG
from playwright.sync_api import Page, expect

from jupyter_gpuburst.bench.hubproc import HubProcess

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def usage_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    loop = LoopThread()
    hub = HubProcess(tmp_path_factory.mktemp("hub"), CONFIG)
    try:
        loop.run(hub.start())
        yield hub
    finally:
        loop.run(hub.stop())
        loop.close()


def log_in_to_capacity(page: Page, hub: HubProcess, user: str) -> None:
    page.goto(f"{hub.url}/hub/login?next=%2Fservices%2Fgpuburst%2Fcapacity")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    expect(page.locator("#gpuburst-capacity")).to_be_visible(timeout=30_000)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_admin_reads_gpu_hours_on_the_capacity_page(page: Page, usage_hub: HubProcess, artifacts: Path, theme: str) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in_to_capacity(page, usage_hub, "admin")
    # the hub's own theme toggle keeps its choice here; the capacity page follows it
    page.evaluate("theme => localStorage.setItem('jupyterhub-bs-theme', theme)", theme)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
    top = page.locator("#gpuburst-top-users tbody tr")
    expect(top).to_have_count(2)
    expect(top.first).to_contain_text("bob")
    expect(page.locator("#gpuburst-donor-hours tr[data-site='donor-1'] .gpuburst-hours")).to_have_text("6.00")
    expect(page.locator("#gpuburst-budgets tr[data-budget='user:alice']")).to_contain_text("16.00")
    chart = page.locator("#gpuburst-day-charts figure[data-site='origin'][data-resource='nvidia.com/gpu']")
    expect(chart.locator(".gpuburst-now")).to_have_text("6 / 3 / 0")
    # from two hours ago to now: 3 of 6 GPUs in use, a step line up to the right edge
    expect(chart.locator("path.in-use")).to_have_attribute("d", re.compile(r"H579\.0V82\.0H628\.0V82\.0H628\.0$"))
    # axes a reader can read: GPUs 0 to 6, times of day in UTC up to now, and a legend
    expect(chart.locator("text.gpu-tick")).to_have_text(["0", "2", "4", "6"])
    expect(chart.locator("text.time-tick").last).to_have_text("now")
    expect(chart.locator(".gpuburst-legend li")).to_have_text(["total", "in use", "reserved by spawns starting"])
    # and for a screen reader, the figures in words and hour by hour
    expect(chart.locator("svg desc")).to_contain_text("now 6 total, 3 in use, 0 reserved")
    chart.locator("details summary").click()
    expect(chart.locator(".gpuburst-chart-table tbody tr").first).to_contain_text("05:00")
    chart.locator("details summary").click()  # closed again for the screenshot
    # the profiles larger than their sessions need: alice's 2 GPUs peaked at 6 of 80 GiB
    expect(page.locator("#gpuburst-right-sizing tbody tr")).to_have_count(1)
    expect(page.locator("#gpuburst-right-sizing .gpuburst-share")).to_have_text("8%")
    # readable in both themes: the table's text and the chart's axis differ from the page behind
    colors = page.evaluate(
        """() => [getComputedStyle(document.querySelector('#gpuburst-top-users td')).color,
                 getComputedStyle(document.querySelector('.gpuburst-day-chart text.gpu-tick')).fill,
                 getComputedStyle(document.querySelector('.gpuburst-day-chart path.in-use')).stroke,
                 getComputedStyle(document.body).backgroundColor]"""
    )
    assert colors[3] not in colors[:3], colors
    shot = artifacts / f"capacity-usage-{theme}.png"
    page.locator("#gpuburst-capacity").screenshot(path=str(shot))
    save_docs_screenshot(shot, f"capacity-usage-{theme}.png")
    # as on the hub's own pages: who is logged in, a way out, and the theme toggle, which works
    expect(page.locator("#gpuburst-user")).to_have_text("admin")
    expect(page.locator("#logout")).to_have_attribute("href", "/hub/logout")
    page.locator("#dark-theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark" if theme == "light" else "light")
    assert errors == [], errors
