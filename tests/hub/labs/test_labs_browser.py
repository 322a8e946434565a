"""The labs page in chromium behind a real hub: a teacher checks a booking's cost and GPUs, books
it, and sees it listed and how it went; a refusal is one sentence; light and dark themes."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.hubsite import federation_and_hub
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(300)]

PAGE = "/services/gpuburst/labs"
HUB = """
from jupyter_gpuburst.hub import install
c.Authenticator.allowed_users = {"tina"}
c.JupyterHub.load_groups = {"ml-101": {"users": []}}
c.JupyterHub.load_roles.append({"name": "ml-teacher", "users": ["tina"],
    "scopes": ["custom:gpuburst:labs!group=ml-101", "access:services!service=gpuburst"]})
install(c)
c.LabSettings.teacher_weekly_hours = {"*": 40}
"""


@pytest.fixture(scope="module")
def hub_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with federation_and_hub(tmp_path_factory.mktemp("labs-browser"), HUB) as (_loop, _fed, hub):
        yield hub.url


def open_page(page: Page, hub_url: str, theme: str) -> None:
    page.set_default_timeout(60_000)
    page.goto(f"{hub_url}/hub/logout")
    page.goto(f"{hub_url}/hub/login?next={PAGE}")
    page.locator("#username_input").fill("tina")
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    expect(page.locator("#gpuburst-labs")).to_be_visible(timeout=30_000)
    page.evaluate("theme => localStorage.setItem('jupyterhub-bs-theme', theme)", theme)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_teacher_checks_books_and_reads_a_lab(page: Page, hub_url: str, theme: str) -> None:
    open_page(page, hub_url, theme)
    expect(page.locator("#labs-rules")).to_contain_text("You may book 40 GPU-hours per week.")
    day = (dt.date.today() + dt.timedelta(days=3 if theme == "light" else 4)).isoformat()
    page.locator("#lab-title").fill(f"ML-101 {theme}")
    page.locator("#lab-group").select_option("ml-101")
    page.locator("#lab-profile").select_option("gpu1")
    page.locator("#lab-students").fill("2")
    page.locator("#lab-start").fill(f"{day}T10:00")
    page.locator("#lab-end").fill("12:00")
    page.locator("#lab-preview").click()
    result = page.locator("#lab-result")
    # 2 GPUs x (2 h + 15 min warm-up); the emulator's federation has 10 GPUs
    expect(result).to_have_text(
        re.compile(
            r"^2 GPUs, 4\.5 GPU-hours \(0\.5 of them warming up\)\. The sites have 10 GPUs, other labs hold 0 then, 10 left\. It can be booked\.$"
        )
    )
    page.locator("#lab-save").click()
    row = page.locator("#labs-table tbody tr", has_text=f"ML-101 {theme}")
    expect(row).to_contain_text("approved")
    expect(row).to_contain_text("4.5")
    # the same class again in that slot: one sentence, nothing saved
    page.locator("#lab-title").fill("again")
    page.locator("#lab-group").select_option("ml-101")
    page.locator("#lab-start").fill(f"{day}T11:00")
    page.locator("#lab-end").fill("13:00")
    page.locator("#lab-save").click()
    expect(result).to_have_text(re.compile(rf"^ml-101 already has a lab then: ML-101 {theme}, .* 10:00-12:00\.$"))
    expect(result).to_have_class(re.compile("alert-danger"))
    expect(page.locator("#labs-table tbody tr", has_text="again")).to_have_count(0)
    row.get_by_role("button", name="How it went").click()
    expect(result).to_have_text(f"The lab ML-101 {theme} has not begun yet.")
    page.screenshot(path=str(Path(f"/tmp/labs-page-{theme}.png")))
