"""The GPU-hour budget in the Lab's GPU kernel launcher, behind the hub and its proxy: a student
with hours left reads what is left under the section's title; one whose budget is used up sees
the cards say so and, on a click, why no GPU kernel starts (no notebook opens); an admin's grant
gives the cards back. Light and dark theme."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from helpers.browser import log_in_to_lab, save_docs_screenshot, switch_theme
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from helpers.kernels import KERNEL_HUB
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

GPU_SECTION = ".jp-Launcher-section:has(.jp-LauncherCard[data-category='GPU kernels'])"
NOTE = f"{GPU_SECTION} .jp-GpuBurst-launcherNote[data-note^='budget']"
USED_UP = f"{GPU_SECTION} .jp-GpuBurst-launcherNote[data-note='budget-used-up']"
CARD = ".jp-LauncherCard[data-category='GPU kernels']"
# alice has 20 GPU-hours a week like everyone; bob's week is used up (0 hours)
BUDGET_HUB = KERNEL_HUB + '\nc.Spawner.default_url = "/lab"\nc.GPUAccountingSettings.user_budgets = {"*": 20.0, "bob": 0.0}\n'


def resets() -> str:
    """When this week's budget resets, as the launcher says it: on a Sunday (UTC) it is tomorrow."""
    return "tomorrow" if dt.datetime.now(dt.UTC).weekday() == 6 else "Monday"


@pytest.fixture(scope="module")
def budget_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopThread, Hub]]:
    base = tmp_path_factory.mktemp("launcher-budget")
    with federation_and_hub(base, BUDGET_HUB) as (loop, _, hub):
        for student in ("alice", "bob"):
            status, body = loop.run(hub.spawn(student, {"profile": "cpu"}))
            assert status in (201, 202), body
        for student in ("alice", "bob"):
            loop.run(hub.wait_ready(student, timeout=90))
        yield loop, hub


def grant(loop: LoopThread, hub: Hub, user: str, hours: float) -> None:
    async def post() -> tuple[int, str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async with http.post(
                f"{hub.url}/services/gpuburst/api/budgets/grants",
                json={"user": user, "hours": hours},
                headers={"Authorization": f"token {hub.token}"},
            ) as response:
                return response.status, await response.text()

    status, text = loop.run(post())
    assert status == 200, text


def test_the_launcher_says_what_is_left(page: Page, budget_site: tuple[LoopThread, Hub], artifacts: Path) -> None:
    _, hub = budget_site
    log_in_to_lab(page, hub.url, "alice", "lab", landing="lab**")
    note = page.locator(NOTE)
    expect(note).to_have_text(re.compile(rf"^20 of 20 GPU-hours left this week, resets {resets()} 00:00 UTC\.$"), timeout=90_000)
    # the cards still offer their kernels, with what is free now
    expect(page.locator(CARD, has_text="Python 3 (1 GPU) ·").first).to_contain_text("free on origin")
    expect(page.locator(USED_UP)).to_have_count(0)
    # under the section's title, not beside the cards
    title = page.locator(f"{GPU_SECTION} .jp-Launcher-sectionTitle").bounding_box()
    assert note.bounding_box()["y"] > title["y"] + title["height"] - 1
    page.locator(GPU_SECTION).screenshot(path=str(artifacts / "launcher-budget-light.png"))
    save_docs_screenshot(artifacts / "launcher-budget-light.png", "launcher-budget-light.png")


def test_used_up_the_cards_say_why_and_a_grant_gives_them_back(page: Page, budget_site: tuple[LoopThread, Hub], artifacts: Path) -> None:
    loop, hub = budget_site
    log_in_to_lab(page, hub.url, "bob", "lab", landing="lab**")
    switch_theme(page, "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    note = page.locator(NOTE)
    used_up = (
        f"Your GPU-hour budget is used up: 0 of 0 GPU-hours left this week, resets {resets()} 00:00 UTC. Ask the hub's admins for more."
    )
    expect(note).to_have_text(used_up, timeout=90_000)
    card = page.locator(CARD, has_text=re.compile(r"^Python 3 \(1 GPU\) ·"))
    expect(card).to_have_text("Python 3 (1 GPU) · GPU-hour budget used up")
    expect(card).to_have_attribute("title", f"A Python 3 (1 GPU) kernel cannot start now. {used_up}")
    expect(page.locator(USED_UP)).to_have_count(1)
    # dimmed: they cannot start now
    assert float(card.evaluate("e => getComputedStyle(e).opacity")) < 1
    # the sentence is readable on the dark background: a light colour, not the light theme's
    color = note.evaluate("e => getComputedStyle(e).color")
    assert sum(int(v) for v in re.findall(r"\d+", color)[:3]) > 3 * 96, f"{color} is not readable on dark"
    page.locator(GPU_SECTION).screenshot(path=str(artifacts / "launcher-budget-used-up-dark.png"))
    save_docs_screenshot(artifacts / "launcher-budget-used-up-dark.png", "launcher-budget-used-up-dark.png")

    # a click says why, at once, and opens no notebook
    card.click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("No GPU kernel")
    expect(dialog).to_contain_text(used_up)
    dialog.get_by_role("button", name="Ok").click()
    expect(page.locator(".jp-NotebookPanel")).to_have_count(0)

    # an admin grants two hours: the launcher offers the kernels again
    grant(loop, hub, "bob", 2)
    expect(note).to_have_text(re.compile(rf"^2 of 2 GPU-hours left this week, resets {resets()} 00:00 UTC\.$"), timeout=60_000)
    expect(card).to_contain_text("free on origin")
    expect(page.locator(USED_UP)).to_have_count(0)
