"""Stop buttons on the capacity page, in chromium behind a real hub, KubeSpawner and jupyter_server
against the local federation: an admin stops a GPU server and a GPU kernel (after a confirm
step, with a result line), in the light and the dark theme; a stop of something already gone
says so; a helpdesk user who may read the page but not stop servers, a student, and a request
without the page's XSRF token get 403, and nothing stops. Screenshots for docs/screenshots."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.browser import assert_readable, save_docs_screenshot
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from helpers.kernels import KERNEL_HUB
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(300)]

PAGE = "/services/gpuburst/capacity"
STOP_API = "/services/gpuburst/api/stop"
ROWS = "#gpuburst-placements tbody tr"
# "helpdesk" reads the capacity page (admin:users) but may not stop servers (no admin:servers)
STOP_HUB = (
    KERNEL_HUB
    + """
c.Authenticator.admin_users = {"admin"}
c.GPUCullingSettings.period_seconds = 1  # servers report each second (idle culling stays off)
c.JupyterHub.load_roles.append({"name": "helpdesk", "scopes": ["admin:users", "access:services!service=gpuburst"], "users": ["helpdesk"]})
"""
)


@dataclass
class StopSite:
    hub: Hub
    loop: LoopThread
    kernel: str  # bob's GPU kernel's key on the page: "bob/kernel:<id>"

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        async def go() -> tuple[int, Any]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
                headers = {"Authorization": f"token {token or self.hub.token}"}
                async with http.request(method, f"{self.hub.url}{path}", json=body, headers=headers) as response:
                    text = await response.text()
                    return response.status, (json.loads(text) if text.startswith(("{", "[")) else text)

        return self.loop.run(go(), timeout=150)

    def running(self, user: str) -> bool:
        status, model = self.call("GET", f"/hub/api/users/{user}")
        return status == 200 and "" in (model.get("servers") or {})

    def placements(self) -> set[str]:
        status, report = self.loop.run(self.hub.capacity())
        assert status == 200, report
        return {p["server"] for p in report["placements"]}


@pytest.fixture(scope="module")
def stop_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StopSite]:
    with federation_and_hub(tmp_path_factory.mktemp("stops-browser"), STOP_HUB) as (loop, _, hub):
        for user, profile in (("alice", "gpu1"), ("carol", "gpu1"), ("bob", "cpu")):
            status, body = loop.run(hub.spawn(user, {"profile": profile}))
            assert status in (201, 202), body
        for user in ("alice", "carol", "bob"):
            loop.run(hub.wait_ready(user, timeout=90))
        site = StopSite(hub, loop, "")
        status, kernel = site.call("POST", "/user/bob/api/kernels", {"name": "gpuburst-gpu-1"})
        assert status == 201, (kernel, hub.log_tail())
        # a pending kernel: its pod is placed while the start goes on
        wait_until_sync(lambda: any(p.startswith("bob/kernel:") for p in site.placements()), 90, "bob's GPU kernel placed")
        (site.kernel,) = [p for p in site.placements() if p.startswith("bob/kernel:")]
        yield site


def log_in(page: Page, site: StopSite, user: str, theme: str) -> None:
    """``user`` logs in (out first: one browser, several people) and opens the capacity page."""
    page.set_default_timeout(60_000)
    page.goto(f"{site.hub.url}/hub/logout")
    page.goto(f"{site.hub.url}/hub/login?next={PAGE}")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    expect(page.locator("#gpuburst-capacity")).to_be_visible(timeout=30_000)
    use_theme(page, theme)


def use_theme(page: Page, theme: str) -> None:
    # the hub's own theme toggle keeps its choice here; the capacity page follows it
    page.evaluate("theme => localStorage.setItem('jupyterhub-bs-theme', theme)", theme)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)


def stop_button(page: Page, key: str):
    return page.locator(f"{ROWS}[data-server='{key}'] button.gpuburst-stop")


def test_an_admin_stops_a_server_and_a_gpu_kernel(page: Page, stop_site: StopSite, artifacts: Path) -> None:
    site = stop_site
    log_in(page, site, "admin", "light")
    alice = stop_button(page, "alice/")
    expect(alice).to_have_attribute("data-what", "alice's server on origin")

    # a confirm step: Cancel stops nothing
    alice.click()
    dialog = page.locator("#gpuburst-stop-confirm")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Stop alice's server on origin?")
    page.screenshot(path=str(artifacts / "capacity-stop-confirm-light.png"))
    save_docs_screenshot(artifacts / "capacity-stop-confirm-light.png", "capacity-stop-confirm-light.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert site.running("alice")

    # Stop it, with a reason for alice: the result line says so, and the server goes
    alice.click()
    dialog.get_by_label("Reason, for its user (optional)").fill("The lab is over <3")
    dialog.get_by_role("button", name="Stop it").click()
    result = page.locator("#gpuburst-stop-result")
    expect(result).to_have_text("alice's server is stopping; its GPUs go back once its pod is gone. Reload the page to see its GPUs free.")
    expect(result).to_have_class(re.compile("alert-success"))
    expect(alice).to_have_text("Stopped")
    # its row no longer says it runs
    expect(page.locator(f"tr[data-server='{alice.get_attribute('data-target')}'] td").nth(1)).to_have_text("stopping")
    wait_until_sync(lambda: not site.running("alice"), 60, "alice's server stopped")
    assert "Stop: admin stops alice's server from the capacity page" in site.hub.log()
    # on behalf of the admin who clicked: the hub's own API saw the admin's token, not the service's
    assert re.search(r"DELETE /hub/api/users/alice/server \(admin@", site.hub.log())
    # her spawn page says why
    page_html = site.loop.run(site.hub.spawn_page("alice"))
    assert 'id="gpuburst-stopped"' in page_html
    assert "Your server was stopped by the hub&#39;s admins: The lab is over &lt;3. Start it again" in page_html, page_html
    assert "stops alice's server from the capacity page (reason: 'The lab is over <3')" in site.hub.log()

    # bob's GPU kernel, in the dark theme: its pod goes, bob's CPU server stays
    use_theme(page, "dark")
    kernel = stop_button(page, site.kernel)
    kernel.click()
    # the dialog forgets the last stop's reason: bob's kernel is stopped without one
    expect(page.locator("#gpuburst-stop-reason")).to_have_value("")
    page.locator("#gpuburst-stop-confirm").get_by_role("button", name="Stop it").click()
    record_id = site.kernel.removeprefix("bob/kernel:")
    expect(result).to_have_text(
        f"bob's GPU kernel {record_id} is stopped; its GPU goes back once its pod is gone. Reload the page to see its GPUs free."
    )
    # the result reads on the dark page
    colors = result.evaluate("e => [getComputedStyle(e).color, getComputedStyle(document.body).backgroundColor]")
    assert colors[0] != colors[1], colors
    page.locator("#gpuburst-capacity").screenshot(path=str(artifacts / "capacity-stop-dark.png"))
    save_docs_screenshot(artifacts / "capacity-stop-dark.png", "capacity-stop-dark.png")
    wait_until_sync(lambda: site.kernel not in site.placements(), 60, "bob's GPU kernel gone")
    assert site.running("bob")
    # bob's server hears why, for his notebook
    wait_until_sync(lambda: kernel_note(site) is not None, 30, "bob's server told why")
    assert kernel_note(site) == "This GPU kernel was stopped by the hub's admins. Restart the kernel to start it again on a free GPU."

    # a stop of something already gone says so
    status, body = site.call("POST", STOP_API, {"target": "alice/"})
    assert (status, body["message"]) == (200, "alice's server had already stopped.")
    status, body = site.call("POST", STOP_API, {"target": site.kernel})
    assert (status, body["message"]) == (200, f"bob's GPU kernel {record_id} had already stopped.")
    status, body = site.call("POST", STOP_API, {"target": "nobody"})
    assert status == 400 and "a stop is" in body["message"]
    status, body = site.call("POST", STOP_API, {"target": "carol/", "reason": "x" * 201})
    assert status == 400 and "at most 200 characters" in body["message"]
    assert site.running("carol")


def test_who_may_not_stop_gets_403_and_nothing_stops(page: Page, stop_site: StopSite) -> None:
    site = stop_site
    # a helpdesk user reads the page, without stop buttons
    log_in(page, site, "helpdesk", "light")
    expect(page.locator(f"{ROWS}[data-server='carol/']")).to_be_visible()
    expect(page.locator("button.gpuburst-stop")).to_have_count(0)
    # and the API refuses their own token: the service's scopes do not stand in for theirs
    status, token = site.call("POST", "/hub/api/users/helpdesk/tokens", {"note": "helpdesk test"})
    assert status == 201, token
    status, body = site.call("POST", STOP_API, {"target": "carol/"}, token=token["token"])
    assert status == 403 and "admin:servers" in body["message"], body
    # a student's token does not even reach it
    status, token = site.call("POST", "/hub/api/users/bob/tokens", {"note": "student test"})
    assert status == 201, token
    status, _ = site.call("POST", STOP_API, {"target": "carol/"}, token=token["token"])
    assert status == 403

    # an admin's page session without the page's XSRF token (another site's form, say)
    log_in(page, site, "admin", "light")
    status = page.evaluate(
        """url => fetch(url, {method: 'POST', headers: {'Content-Type': 'application/json'},
                             body: JSON.stringify({target: 'carol/'})}).then(r => r.status)""",
        f"{site.hub.url}{STOP_API}",
    )
    assert status == 403
    assert site.running("carol")
    assert "carol/" in site.placements()


def kernel_note(site: StopSite) -> str | None:
    status, state = site.call("GET", "/user/bob/api/gpuburst/culling")
    assert status == 200, state
    return next((s["reason"] for s in state.get("stopped") or []), None)


def wait_until_sync(condition, timeout: float, what: str) -> None:
    """Poll a plain predicate from the test's thread (Playwright's sync API owns its loop)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_jupyterhubs_admin_page_points_to_the_stop_that_says_why(page: Page, stop_site: StopSite, theme: str) -> None:
    """JupyterHub's own Stop buttons tell the student nothing: its admin page says where the
    Stop with a reason is, and the page's own user table still works under that line."""
    site = stop_site
    log_in(page, site, "admin", theme)
    page.goto(f"{site.hub.url}/hub/admin")
    note = page.locator(".gpuburst-admin-note")
    expect(note).to_contain_text("A Stop here tells the student nothing.")
    assert_readable(note, dark=theme == "dark")
    # JupyterHub's React table renders below the line, with the users who have servers
    expect(page.get_by_test_id("user-name-div-carol")).to_be_visible()
    note.get_by_role("link", name="GPU capacity").click()
    expect(page.locator("#gpuburst-capacity")).to_be_visible()
    expect(stop_button(page, "carol/")).to_be_visible()
