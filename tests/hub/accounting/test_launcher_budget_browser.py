"""The GPU-hour budget in the Lab's GPU kernel launcher, behind the hub and its proxy: a student
with hours left reads what is left under the section's title; one whose budget is used up sees
the cards say so and, on a click, why no GPU kernel starts (no notebook opens); an admin's grant
gives the cards back. During another class's lab, the launcher says what the lab holds. Light and
dark theme."""

from __future__ import annotations

import datetime as dt
import json
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
HELD = f"{GPU_SECTION} .jp-GpuBurst-launcherNote[data-note='held']"
# alice has 20 GPU-hours a week like everyone; bob's week is used up (0 hours); tina teaches
# ml-101, a class neither is in
BUDGET_HUB = (
    KERNEL_HUB
    + """
c.Spawner.default_url = "/lab"
c.GPUAccountingSettings.user_budgets = {"*": 20.0, "bob": 0.0}
c.JupyterHub.load_groups["ml-101"] = {"users": []}
c.JupyterHub.load_roles.append({"name": "ml-teacher", "users": ["tina"],
    "scopes": ["custom:gpuburst:labs!group=ml-101", "access:services!service=gpuburst"]})
"""
)


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


def post(loop: LoopThread, hub: Hub, path: str, body: dict, token: str) -> tuple[int, str]:
    async def send() -> tuple[int, str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            async with http.post(f"{hub.url}/services/gpuburst/{path}", json=body, headers={"Authorization": f"token {token}"}) as response:
                return response.status, await response.text()

    return loop.run(send())


def grant(loop: LoopThread, hub: Hub, user: str, hours: float) -> None:
    status, text = post(loop, hub, "api/budgets/grants", {"user": user, "hours": hours}, hub.token)
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


def test_during_another_classs_lab_the_launcher_says_what_it_holds(
    page: Page, budget_site: tuple[LoopThread, Hub], artifacts: Path
) -> None:
    loop, hub = budget_site
    log_in_to_lab(page, hub.url, "alice", "lab", landing="lab**")
    expect(page.locator(NOTE)).to_have_count(1, timeout=90_000)
    expect(page.locator(HELD)).to_have_count(0)  # no lab on
    loop.run(hub.create_user("tina"))
    status, token = loop.run(hub.api("POST", "/users/tina/tokens", {"note": "launcher test"}))
    assert status == 201, token
    # its warm-up (15 minutes) already open: on now; its one placeholder on the donor leaves the origin's GPUs be
    start = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    lab = {"title": "ML-101", "group": "ml-101", "profile": "gpu1", "students": 1, "sites": ["donor-1"]}
    lab.update(start=start.isoformat(), end=(start + dt.timedelta(hours=1)).isoformat())
    status, text = post(loop, hub, "api/labs", lab, token["token"])
    assert status == 201, text
    until = dt.datetime.fromisoformat(json.loads(text)["end"]).strftime("%H:%M")
    held = page.locator(HELD)
    # the launcher asks every 10 s, the server the hub every 5 s at most
    expect(held).to_have_text(f"1 GPU is held for the lab ML-101 until {until}.", timeout=60_000)
    title = page.locator(f"{GPU_SECTION} .jp-Launcher-sectionTitle").bounding_box()
    assert held.bounding_box()["y"] > title["y"] + title["height"] - 1
    page.locator(GPU_SECTION).screenshot(path=str(artifacts / "launcher-lab-held-light.png"))
    switch_theme(page, "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    expect(held).to_have_text(f"1 GPU is held for the lab ML-101 until {until}.")
    expect(page.locator("#jupyterlab-splash")).to_have_count(0)  # the theme's change is over
    color = held.evaluate("e => getComputedStyle(e).color")
    assert sum(int(v) for v in re.findall(r"\d+", color)[:3]) > 3 * 96, f"{color} is not readable on dark"
    page.locator(GPU_SECTION).screenshot(path=str(artifacts / "launcher-lab-held-dark.png"))
