"""A queued spawn in chromium, behind the hub and its proxy: the spawn page says the student's
place in line and the wait, moves them up live, and its Cancel leaves the queue (light and dark)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import save_docs_screenshot
from helpers.federation import DONOR, occupy
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

CONFIG = """
from jupyter_gpuburst.hub import install
install(c)
c.GPUBurstSpawner.queue_when_full = True
c.KubeSpawner.start_timeout = 300
# straight to the spawn-pending page, which is what a queued student watches
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
"""


class Site:
    def __init__(self, loop: LoopThread, fed: Any, hub: Hub) -> None:
        self.loop, self.fed, self.hub = loop, fed, hub

    def capacity(self) -> dict[str, Any]:
        status, report = self.loop.run(self.hub.capacity())
        assert status == 200, report
        return report

    def pod(self, user: str) -> Any:
        try:
            return self.fed.origin.store.get("pods", "default", f"jupyter-{user}")
        except Exception:  # noqa: BLE001 - not there
            return None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    async def fill(fed: Any) -> None:
        occupy(fed, "origin-gpu", 2, "hog")
        occupy(fed, DONOR, 8, "donor-hog")

    with federation_and_hub(tmp_path_factory.mktemp("queue-browser"), CONFIG, fill) as (loop, fed, hub):
        yield Site(loop, fed, hub)


def luminance(css_color: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css_color)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_spawn_page_says_the_place_in_line_live_and_cancel_leaves_the_queue(
    page: Page, site: Site, theme: str, artifacts: Path
) -> None:
    student, ahead = f"queued-{theme}", f"ahead-{theme}"
    # someone pressed Start first: the student is 2nd in line
    status, body = site.loop.run(site.hub.spawn(ahead, {"profile": "gpu1"}))
    assert status == 202, body
    page.emulate_media(color_scheme=theme)
    page.goto(f"{site.hub.url}/hub/login")
    page.locator("#username_input").fill(student)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    page.goto(f"{site.hub.url}/hub/spawn")
    page.locator("label[for='profile-item-gpu1']").click()
    page.locator("#spawn_form button[type=submit]").click()
    page.wait_for_url(re.compile(rf"/hub/spawn-pending/{student}"), timeout=30_000)
    assert page.evaluate("document.documentElement.dataset.bsTheme") == theme

    headline = page.locator("#gpuburst-headline")
    cancel = page.get_by_role("button", name="Cancel", exact=True)
    expect(headline).to_have_text("You are 2nd in line for a GPU (wait time unknown).", timeout=30_000)
    expect(cancel).to_be_visible()
    # in line, Cancel is the one way out, and the headline is not repeated under the bar
    expect(page.locator("#stop-server-btn")).to_be_hidden()
    expect(page.locator("#progress-message")).to_be_hidden()
    # readable in either theme: the text stands out from its box, which follows the theme
    box = page.locator("#gpuburst-headline-box")
    background = luminance(box.evaluate("e => getComputedStyle(e).backgroundColor"))
    text = luminance(headline.evaluate("e => getComputedStyle(e).color"))
    assert abs(background - text) > 0.4, (theme, background, text)
    assert (background < 0.5) == (theme == "dark"), (theme, background)
    shot = artifacts / f"spawn-queue-{theme}.png"
    page.screenshot(path=str(shot), full_page=True)
    if theme == "light":
        save_docs_screenshot(shot, "spawn-queue.png")

    # the one ahead gives up: the student moves up without reloading the page
    site.loop.run(site.hub.api("DELETE", f"/users/{ahead}/server"))
    expect(headline).to_have_text("You are next in line for a GPU (wait time unknown).", timeout=30_000)

    cancel.click()
    expect(headline).to_contain_text("You left the queue; no server was started.", timeout=30_000)
    expect(cancel).to_be_hidden()
    expect(page.locator("#gpuburst-home")).to_have_attribute("href", "/hub/home")
    # JupyterHub's own stream ends with the cancelled spawn; the page stays, saying so
    expect(page.locator("#progress-bar")).to_have_class(re.compile(r"\bbg-danger\b"), timeout=30_000)
    expect(page).to_have_url(re.compile(rf"/hub/spawn-pending/{student}"))
    # nothing on the page says a server is starting, or offers to stop one
    expect(page.locator("#gpuburst-default-message")).to_be_hidden()
    expect(page.locator("#stop-server-btn")).to_be_hidden()
    expect(page.locator(".progress")).to_be_hidden()
    report = site.capacity()
    assert report["queue_length"] == 0 and report["reservations"] == 0, report
    assert site.pod(student) is None and site.pod(ahead) is None
