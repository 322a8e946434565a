"""A student's JupyterLab behind the hub when the hub stops the server under it (culling, a
budget, an admin): the lab's notice says the server is stopping and where to read why, and
stays readable: JupyterLab's own "Server unavailable or unreachable … Restart" dialog, which
would cover it once the lab finds the server gone, does not come while the notice is up. In the
light and the dark theme."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.browser import log_in_to_lab, switch_theme
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from playwright.sync_api import Page, Response, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(300)]

STUDENT = "alice"
HUB = """
c.Spawner.default_url = "/lab"
from jupyter_gpuburst.hub import install
install(c)
"""
NOTICE = "This server is stopping. Its page at the hub says why and starts it again."


@dataclass
class Site:
    hub: Hub
    loop: LoopThread

    def start_server(self) -> None:
        status, body = self.loop.run(self.hub.spawn(STUDENT, {"profile": "cpu"}))
        assert status in (201, 202), body
        self.loop.run(self.hub.wait_ready(STUDENT, timeout=90))

    def stop_server(self) -> None:
        status, body = self.loop.run(self.hub.api("DELETE", f"/users/{STUDENT}/server"))
        assert status in (202, 204), body


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with federation_and_hub(tmp_path_factory.mktemp("lab-server-stops"), HUB) as (loop, _, hub):
        yield Site(hub, loop)


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_the_stop_notice_stays_readable_when_the_lab_finds_its_server_gone(page: Page, site: Site, theme: str, artifacts: Path) -> None:
    site.start_server()
    log_in_to_lab(page, site.hub.url, STUDENT, "lab?reset", landing="lab**")
    dark = theme.endswith("Dark")
    switch_theme(page, theme)
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false" if dark else "true", timeout=20_000)
    # what tells JupyterLab its server is gone: the hub answers the lab's polls in its stead
    gone: list[str] = []

    def answered(response: Response) -> None:
        # (its kernels', sessions' and terminals' lists: a 424 or 503 there is its "connection lost")
        if re.search(rf"/user/{STUDENT}/api/(kernels|sessions|terminals)(\?|$)", response.url) and response.status in (424, 503):
            gone.append(response.url)

    page.on("response", answered)
    site.stop_server()
    notice = page.get_by_role("alert").filter(has_text=NOTICE)
    expect(notice.first).to_be_visible(timeout=30_000)
    deadline = time.monotonic() + 90
    while not gone:
        assert time.monotonic() < deadline, "the lab never heard that its server is gone"
        page.wait_for_timeout(500)
    # JupyterLab had its chance to cover the notice: it did not
    page.wait_for_timeout(3_000)
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    expect(notice.first).to_be_visible()
    page.screenshot(path=str(artifacts / f"lab-server-stopping-{'dark' if dark else 'light'}.png"))
    # its Why? goes to the server's page at the hub, which says why and starts it again
    notice.first.get_by_role("button", name="Why?").click()
    page.wait_for_url(re.compile(rf"/hub/spawn(/{STUDENT})?"))
