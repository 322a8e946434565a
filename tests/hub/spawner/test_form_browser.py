"""The hub's spawn form and the admin capacity page in chromium, against a real hub and federation.

A student logs in through the login page, sees per GPU profile how many GPUs are free on each
site and where a spawn would land, finds a profile no site can serve greyed out with its reason,
starts a free one and reads the placement reason on the spawn-pending page. An admin then opens
the capacity page. The federation runs on its own event loop in a thread, because Playwright's
sync API owns the main thread's loop.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import save_docs_screenshot
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from playwright.sync_api import Browser, Locator, Page, expect

from jupyter_gpuburst.core import keys

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(180)]

DONOR = "donor-1"
ORIGIN_NODE = "origin-gpu"
STUDENT = "student1"
ADMIN = "teacher"
HELD_LOCALLY = 1  # origin GPUs taken by someone else's pod, so 2 GPUs must burst to the donor
HUGE = 16  # more GPUs than any site has

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "description": "No GPU.", "default": True},
    {
        "display_name": "1 GPU",
        "slug": "gpu-1",
        "description": "One GPU: on the origin when free, otherwise on a donor.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
    },
    {
        "display_name": "2 GPUs",
        "slug": "gpu-2",
        "description": "Two GPUs on one node: on the origin when free, otherwise on a donor.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "2"}},
    },
    {
        "display_name": f"{HUGE} GPUs",
        "slug": f"gpu-{HUGE}",
        "description": f"{HUGE} GPUs on one node, for the largest training runs.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": str(HUGE)}},
    },
]


@dataclass
class HubSite:
    hub: Hub
    fed: Any
    loop: LoopThread
    go_file: Path  # user servers wait for this file before they start

    def release_servers(self) -> None:
        self.go_file.touch()

    def capacity(self) -> dict[str, Any]:
        status, report = self.loop.run(self.hub.capacity())
        assert status == 200, report
        return report

    def pod(self, user: str) -> dict[str, Any] | None:
        async def get() -> dict[str, Any] | None:
            try:
                return self.fed.origin.store.get("pods", "default", f"jupyter-{user}")
            except Exception:  # noqa: BLE001 - not there (yet)
                return None

        return self.loop.run(get())

    def created_pod(self, user: str, timeout: float = 30) -> dict[str, Any] | None:
        """The server's pod once the hub has created it: the hub's decision reaches the progress
        log first, and the create follows (a second later on a loaded machine)."""
        deadline = time.monotonic() + timeout
        while (pod := self.pod(user)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return pod


def hub_config(go_file: Path) -> str:
    """Extra hub config: our profiles, the admin page, and servers that start on a signal."""
    # Held until the test has read the spawn-pending page; otherwise a fast start redirects
    # the browser to the server before the page is seen.
    wait_then_start = f'while [ ! -e {shlex.quote(str(go_file))} ]; do sleep 0.1; done; exec "$0" "$@"'
    return f"""
from jupyter_gpuburst.hub import install
install(c)
c.Authenticator.admin_users = {{{ADMIN!r}}}
c.KubeSpawner.profile_list = {PROFILES!r}
# The container's command wraps its args (the single-user server and its options).
c.KubeSpawner.extra_container_config = {{"command": ["/bin/sh", "-c", {wait_then_start!r}]}}
c.GPUBurstSpawner.max_gpus_per_server = {HUGE}
# Straight to the spawn-pending page, which is what a student watches during a start.
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
"""


def occupy(store: Any, node: str, count: int) -> None:
    """Someone else's pod holding ``count`` GPUs of ``node`` (bound directly)."""
    store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    spec = {
        "nodeName": node,
        "containers": [
            {"name": "c", "image": "busybox", "command": ["sleep", "600"],
             "resources": {"limits": {"nvidia.com/gpu": str(count)}}},
        ],
    }  # fmt: skip
    store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "others"}, "spec": spec})


@pytest.fixture(scope="module")
def hub_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubSite]:
    base = tmp_path_factory.mktemp("hub-form")

    async def fill(fed: Any) -> None:
        occupy(fed.origin.store, ORIGIN_NODE, HELD_LOCALLY)

    # leaving also ends every pod process, a server still held at the go file included
    with federation_and_hub(base, hub_config(base / "go"), fill) as (loop, fed, hub):
        yield HubSite(hub, fed, loop, base / "go")


def log_in(page: Page, site: HubSite, user: str) -> None:
    page.goto(f"{site.hub.url}/hub/login")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    expect(page.locator("#login_widget")).to_contain_text(user, timeout=30_000)


def profile_label(page: Page, slug: str) -> Locator:
    return page.locator(f"label[for='profile-item-{slug}']")


def local_total(site: HubSite) -> int:
    sites = {s["site"]: s for s in site.capacity()["sites"]}
    return int(sites[keys.ORIGIN_SITE]["resources"]["nvidia.com/gpu"]["allocatable"])


def donor_total(site: HubSite) -> int:
    sites = {s["site"]: s for s in site.capacity()["sites"]}
    return int(sites[DONOR]["resources"]["nvidia.com/gpu"]["allocatable"])


def test_spawn_form_shows_where_each_profile_would_land(page: Page, hub_site: HubSite, artifacts: Path) -> None:
    local, donor = local_total(hub_site), donor_total(hub_site)
    assert local - HELD_LOCALLY < 2 <= donor < HUGE, "2 GPUs must burst to the donor, 16 fit nowhere"
    log_in(page, hub_site, STUDENT)
    page.goto(f"{hub_site.hub.url}/hub/spawn")
    expect(page.locator("#spawn_form")).to_be_visible(timeout=30_000)
    free_now = rf"Free now: origin {local - HELD_LOCALLY} of {local}, {DONOR} {donor} of {donor}\."

    one = profile_label(page, "gpu-1")
    expect(one).to_contain_text(re.compile(rf"1 GPU\. {free_now} Would start on the origin\."))
    two = profile_label(page, "gpu-2")
    expect(two).to_contain_text(re.compile(rf"2 GPUs\. {free_now} Would start on {DONOR}\."))
    expect(profile_label(page, "cpu")).not_to_contain_text("Free now")
    for slug in ("cpu", "gpu-1", "gpu-2"):
        expect(page.locator(f"#profile-item-{slug}")).to_be_enabled()
        expect(profile_label(page, slug)).not_to_have_class(re.compile("gpuburst-full"))
    expect(page.locator("#profile-item-cpu")).to_be_checked()

    full = profile_label(page, f"gpu-{HUGE}")
    expect(full).to_have_class(re.compile(r"\bgpuburst-full\b"))
    expect(full).to_contain_text(f"Never fits: No site can ever start {HUGE} GPUs")
    expect(full).to_have_attribute("title", re.compile(r"^Never fits: "))
    opacity = float(full.evaluate("el => getComputedStyle(el).opacity"))
    assert opacity < 1, "a full profile must look greyed out"
    expect(page.locator(".spawn-error-msg, .alert-danger:visible")).to_have_count(0)

    shot = artifacts / "spawn-form.png"
    page.screenshot(path=str(shot), full_page=True)
    save_docs_screenshot(shot, "spawn-form.png")


def test_full_profile_cannot_be_picked(page: Page, hub_site: HubSite) -> None:
    log_in(page, hub_site, STUDENT)
    page.goto(f"{hub_site.hub.url}/hub/spawn")
    radio = page.locator(f"#profile-item-gpu-{HUGE}")
    expect(radio).to_be_disabled(timeout=30_000)
    profile_label(page, f"gpu-{HUGE}").click(force=True)  # force: a greyed-out label still takes clicks
    expect(radio).not_to_be_checked()
    picked = page.evaluate("() => new FormData(document.getElementById('spawn_form')).getAll('profile')")
    assert picked == ["cpu"], picked


def test_free_profile_starts_and_pending_page_says_why(page: Page, hub_site: HubSite, artifacts: Path) -> None:
    log_in(page, hub_site, STUDENT)
    page.goto(f"{hub_site.hub.url}/hub/spawn")
    profile_label(page, "gpu-2").click()
    expect(page.locator("#profile-item-gpu-2")).to_be_checked()
    page.locator("#spawn_form button[type=submit]").click()

    page.wait_for_url(re.compile(rf"^{re.escape(hub_site.hub.url)}/hub/spawn-pending/{STUDENT}"), timeout=30_000)
    expect(page.locator("#progress-bar")).to_be_attached()
    # The student stays on the page the proxy served: progress arrives as the hub sends it.
    log = page.locator("#progress-log")
    expect(log).to_contain_text(DONOR, timeout=30_000)
    pod = hub_site.created_pod(STUDENT)
    assert pod is not None, "the server's pod was not created"
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == DONOR
    reason = pod["metadata"]["annotations"][keys.REASON_ANNOTATION]
    # The decision is one progress message, word for word the reason on the pod.
    expect(log.locator(".progress-log-event").filter(has_text=reason)).to_have_count(1)
    expect(page.locator("#progress-message")).not_to_be_empty()
    page.locator("#progress-details > summary").click()  # what a curious student opens
    expect(log).to_be_visible()
    shot = artifacts / "spawn-pending.png"
    page.screenshot(path=str(shot), full_page=True)

    # Once the server is up, the same page sends the student on to it by itself.
    hub_site.release_servers()
    page.wait_for_url(re.compile(rf"^{re.escape(hub_site.hub.url)}/user/{STUDENT}/"), timeout=90_000)


def test_admin_capacity_page_shows_sites(browser: Browser, browser_context_args: dict, hub_site: HubSite, artifacts: Path) -> None:
    context = browser.new_context(**browser_context_args)
    try:
        page = context.new_page()
        log_in(page, hub_site, ADMIN)
        page.goto(f"{hub_site.hub.url}/services/gpuburst/capacity")
        expect(page.locator("#gpuburst-capacity h1")).to_have_text("GPU capacity", timeout=30_000)
        report = hub_site.capacity()
        names = [s["site"] for s in report["sites"]]
        assert names[0] == keys.ORIGIN_SITE and DONOR in names, names
        rows = page.locator("#gpuburst-sites tbody tr[data-site]")
        expect(rows.locator("th")).to_have_text(names)
        for site in report["sites"]:
            numbers = site["resources"]["nvidia.com/gpu"]
            row = page.locator(f"#gpuburst-sites tr[data-site='{site['site']}'][data-resource='nvidia.com/gpu']")
            expect(row.locator(".gpuburst-free")).to_have_text(str(numbers["free"]))
            expect(row.locator(".gpuburst-total")).to_have_text(str(numbers["allocatable"]))
            expect(row.locator(".badge")).to_have_text("ready" if site["ready"] else "not ready")
        local = {s["site"]: s for s in report["sites"]}[keys.ORIGIN_SITE]["resources"]["nvidia.com/gpu"]
        assert local["free"] == local["allocatable"] - HELD_LOCALLY, local
        servers = {p["server"]: p for p in report["placements"]}
        for name, placement in servers.items():
            cells = page.locator(f"#gpuburst-placements tr[data-server='{name}'] td")
            shown = placement["user"] + (f"/{placement['server_name']}" if placement["server_name"] else "")
            expect(cells.nth(0)).to_have_text(shown)
            expect(cells.nth(2)).to_have_text(placement["site"])
            expect(cells.nth(5)).to_have_text(placement["reason"])
            # site, node and GPU count each read on one line (a name broke at its hyphen)
            for column in (2, 3, 4):
                lines = cells.nth(column).evaluate(
                    "e => { const r = document.createRange(); r.selectNodeContents(e);"
                    " return new Set([...r.getClientRects()].map(b => Math.round(b.top))).size; }"
                )
                assert lines == 1, f"column {column} of {name} wraps over {lines} lines"
        expect(page.locator(".alert-danger:visible")).to_have_count(0)

        shot = artifacts / "capacity-page.png"
        page.screenshot(path=str(shot), full_page=True)
        save_docs_screenshot(shot, "capacity-page.png")
    finally:
        context.close()
