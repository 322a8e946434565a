"""What a new user and the admin meet in `gpuburst demo`, in chromium (light and dark):

- the admin runs it with ``--config my_config.py``: the login page says what that file set;
- a new user picks the kernel-mode profile and starts the GPU kernel that takes a whole node's
  GPUs from the launcher, again until one waits in line: the status bar and the GPU panel say
  its place at once, and the panel's Cancel takes it out of the line;
- the admin, teacher, finds the lab the demo has booked on the labs page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from helpers.browser import dismiss_news, switch_theme
from helpers.demo_process import DemoSite, demo_site
from playwright.sync_api import Page, expect

from jupyter_gpuburst.demo import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(420)]

ANNOUNCEMENT = "Trying my own settings before deploying them"
PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
KERNEL_STATUS = ".jp-GpuBurst-kernelStatusText"
WHOLE_NODE = "Python 3 (8 GPUs)"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    state = tmp_path_factory.mktemp("demo-queue")
    mine = state / "my_config.py"
    mine.write_text(f"c.JupyterHub.template_vars = {{'announcement_login': {ANNOUNCEMENT!r}}}\n")
    with demo_site(state, "--config", str(mine)) as site:
        assert f"start '{WHOLE_NODE}' in the launcher, then again until one waits in line" in site.output, site.output
        yield site


def log_in(page: Page, demo: DemoSite, user: str, password: str, next_path: str = "") -> None:
    page.set_default_timeout(60_000)
    page.goto(f"{demo.url}/hub/login" + (f"?next={next_path}" if next_path else ""))
    # the admin's --config file: loaded after the demo's own, its settings show
    expect(page.locator(".announcement")).to_have_text(ANNOUNCEMENT)
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill(password)
    page.locator("#login_submit").click()


def lightness(css_color: str) -> float:
    return sum(int(v) for v in re.findall(r"\d+", css_color)[:3]) / (3 * 255)


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_a_new_user_fills_the_gpus_and_meets_the_queue(page: Page, demo: DemoSite, theme: str) -> None:
    dark = theme.endswith("Dark")
    user = "student6" if dark else "student5"
    log_in(page, demo, user, DEFAULT_PASSWORD)
    page.check("#profile-item-cpu-gpu-kernels")
    page.click("#spawn_form [type=submit]")
    page.wait_for_url(f"**/user/{user}/lab**", timeout=120_000)
    dismiss_news(page)
    if dark:
        switch_theme(page, theme)
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    status = page.locator(KERNEL_STATUS)
    # as the banner says: start it, then again until one waits (the donor's 8 GPUs may already
    # be another user's: then the first one waits)
    for attempt in range(2):
        if attempt:
            page.get_by_role("button", name="New Launcher", exact=False).first.click()
        card = page.locator(".jp-LauncherCard[data-category='GPU kernels']", has_text=re.compile(rf"^{re.escape(WHOLE_NODE)} ·"))
        expect(card.last).to_be_visible(timeout=90_000)
        card.last.click()
        expect(status).to_have_text(re.compile(r"^(GPU kernel: donor-1|Waiting for a GPU: )"), timeout=120_000)
        if status.inner_text().startswith("Waiting"):
            break
    # its place in line at once (a long-poll step of 20 s held it back)
    expect(status).to_have_text("Waiting for a GPU: next in line, wait time unknown", timeout=10_000)
    assert (lightness(status.evaluate("e => getComputedStyle(e).color")) > 0.5) == dark

    page.locator(STATUS).click()
    row = page.locator(f"{PANEL} .jp-GpuBurst-gpuKernels tbody tr", has_text="Waiting for a GPU")
    expect(row).to_contain_text("Waiting for a GPU: next in line, wait time unknown")
    cancel = row.get_by_role("button", name="Cancel", exact=True)
    expect(cancel).to_be_visible()
    background = page.locator(PANEL).evaluate("e => getComputedStyle(e).backgroundColor")
    assert (lightness(background) < 0.5) == dark, background
    cancel.click()
    expect(page.locator(f"{PANEL} .jp-GpuBurst-cancelWait")).to_have_count(0, timeout=30_000)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_admin_finds_the_demos_booked_lab(page: Page, demo: DemoSite, theme: str) -> None:
    page.goto(f"{demo.url}/hub/logout")
    log_in(page, demo, "teacher", demo.admin_password, "/services/gpuburst/labs")
    expect(page.locator("#gpuburst-labs")).to_be_visible(timeout=30_000)
    page.evaluate("theme => localStorage.setItem('jupyterhub-bs-theme', theme)", theme)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
    row = page.locator("#labs-table tbody tr", has_text="ML-101")
    expect(row).to_have_count(1)
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("ml-101")
    expect(cells.nth(2)).to_have_text("teacher")
    expect(cells.nth(4)).to_have_text("2 x gpu-1")
    expect(cells.nth(6)).to_have_text("approved")
    # the class's members: the banner's students, a group on the hub
    expect(page.locator("#lab-group option", has_text="ml-101")).to_have_count(1)
    text = page.locator("body").evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    assert (lightness(text[1]) < 0.5) == (theme == "dark"), text
