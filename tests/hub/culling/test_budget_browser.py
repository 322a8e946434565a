"""A student's JupyterLab behind the hub, on a GPU server whose GPU-hour budget runs out while it
runs (idle culling off): the GPU panel and the status bar warn that the server stops, with no
Keep, and the warning reads in the light and the dark theme. Screenshots for docs/screenshots."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from helpers.browser import assert_readable, dismiss_news, log_in_to_lab, save_docs_screenshot, switch_theme
from helpers.hub import Hub
from helpers.hubsite import federation_and_hub
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
WARNING = f"{PANEL} .jp-GpuBurst-cullWarning"
STUDENT = "alice"
# alice's week is 0 GPU-hours; an admin's grant of 3.6 GPU-seconds lets her start, and they run
# out at once; the stop would come 10 min later, after the test
BUDGET = """
c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
c.Spawner.default_url = "/lab"
c.GPUCullingSettings.period_seconds = 1
c.GPUAccountingSettings.user_budgets = {"*": 20.0, "alice": 0.0}
c.GPUAccountingSettings.budget_grace_seconds = 600
from jupyter_gpuburst.hub import install
install(c)
"""


@pytest.fixture(scope="module")
def budget_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with federation_and_hub(tmp_path_factory.mktemp("budget-browser"), BUDGET) as (loop, _, hub):

        async def grant() -> int:
            await hub.create_user(STUDENT)
            async with aiohttp.ClientSession() as http:
                url = f"{hub.url}/services/gpuburst/api/budgets/grants"
                body = {"user": STUDENT, "hours": 0.001}
                async with http.post(url, json=body, headers={"Authorization": f"token {hub.token}"}) as response:
                    return response.status

        assert loop.run(grant()) == 200
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "gpu1"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))
        yield hub


def test_the_budget_warning_shows_in_light_and_dark(page: Page, budget_hub: Hub, artifacts: Path) -> None:
    log_in_to_lab(page, budget_hub.url, STUDENT, "lab", landing="lab**")
    page.locator(STATUS).click()
    warning = page.locator(WARNING)
    sentence = re.compile(r"^GPU-hour budget used up: this server stops in (10|9) min\. Ask the hub's admins for more hours\.")
    expect(warning.locator(".jp-GpuBurst-cullText")).to_have_text(sentence, timeout=45_000)
    expect(page.locator(f"{PANEL} .jp-GpuBurst-culling")).to_contain_text("GPU-hour budget")
    # no Keep: only hours help
    expect(warning.get_by_role("button", name="Keep")).to_have_count(0)
    expect(warning).to_contain_text("Save your work.")
    # the status bar says it too
    expect(page.locator("button.jp-GpuBurst-cullStatus")).to_have_text(sentence)
    assert_readable(warning, dark=False)
    # JupyterLab's news question comes late and would cover the panel's foot in the screenshots
    dismiss_news(page)
    page.add_style_tag(content=".Toastify { display: none !important; }")
    page.locator(PANEL).screenshot(path=str(artifacts / "culling-budget-light.png"))
    save_docs_screenshot(artifacts / "culling-budget-light.png", "culling-budget-light.png")

    switch_theme(page, "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    expect(warning.locator(".jp-GpuBurst-cullText")).to_have_text(sentence)
    assert_readable(warning, dark=True)
    page.locator(PANEL).screenshot(path=str(artifacts / "culling-budget-dark.png"))
    save_docs_screenshot(artifacts / "culling-budget-dark.png", "culling-budget-dark.png")
    switch_theme(page, "JupyterLab Light")
