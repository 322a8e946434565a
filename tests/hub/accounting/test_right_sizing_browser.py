"""Right-sizing's sentence in chromium, behind a real hub on the local federation: a student whose
last five GPU sessions peaked at 5 GiB reads on the spawn form that one GPU would do, and in
JupyterLab's launcher, under the GPU kernels, that a MIG 1g.10gb slice would do; readable in the
light and the dark theme of each. Screenshots for docs/accounting.md come from here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.browser import log_in_to_lab, save_docs_screenshot, switch_theme
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from helpers.kernels import KERNEL_HUB
from helpers.usage_hub import SLICE_KERNELS, earlier_sessions
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

STUDENT = "alice"
FORM_SENTENCE = 'Your last 5 GPU sessions peaked at 5 GiB of GPU memory: one GPU would do ("One GPU").'
LAUNCHER_SENTENCE = 'Your last 5 GPU sessions peaked at 5 GiB of GPU memory: a MIG 1g.10gb slice would do ("MIG 1g.10gb").'
NOTE = ".jp-GpuBurst-launcherNote"


@dataclass
class Site:
    hub: Hub
    loop: LoopThread


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("right-sizing")
    ledger = base / "usage.sqlite"
    earlier_sessions(ledger, STUDENT, 5)
    config = KERNEL_HUB + SLICE_KERNELS + f'\nc.Spawner.default_url = "/lab"\nc.GPUAccountingSettings.ledger_path = {str(ledger)!r}\n'
    with federation_and_hub(base, config) as (loop, _, hub):
        yield Site(hub, loop)


def readable(page: Page, selector: str) -> None:
    """The text's colour differs from what is behind it (the theme's, not a fixed one)."""
    colors = page.locator(selector).evaluate(
        """el => {
            let bg = 'rgba(0, 0, 0, 0)';
            for (let n = el; n && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent'); n = n.parentElement) {
                bg = getComputedStyle(n).backgroundColor;
            }
            return [getComputedStyle(el).color, bg];
        }"""
    )
    assert colors[0] != colors[1], colors


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_spawn_form_says_which_smaller_profile_would_do(page: Page, site: Site, artifacts: Path, theme: str) -> None:
    page.goto(f"{site.hub.url}/hub/login?next=%2Fhub%2Fspawn")
    page.locator("#username_input").fill(STUDENT)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    page.evaluate("theme => localStorage.setItem('jupyterhub-bs-theme', theme)", theme)
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
    note = page.locator("#gpuburst-right-size")
    expect(note).to_have_text(FORM_SENTENCE, timeout=30_000)
    # above the profiles, where a student reads before picking one
    assert note.bounding_box()["y"] < page.locator("label[for='profile-item-gpu1']").bounding_box()["y"]
    readable(page, "#gpuburst-right-size")
    shot = artifacts / f"right-sizing-form-{theme}.png"
    page.locator("#spawn_form").screenshot(path=str(shot))
    save_docs_screenshot(shot, f"right-sizing-form-{theme}.png")


def test_the_launcher_says_which_smaller_gpu_kernel_would_do(page: Page, site: Site, artifacts: Path) -> None:
    status, body = site.loop.run(site.hub.spawn(STUDENT, {"profile": "cpu"}))
    assert status in (201, 202), body
    site.loop.run(site.hub.wait_ready(STUDENT, timeout=90))
    log_in_to_lab(page, site.hub.url, STUDENT, "lab", landing="lab**")
    note = page.locator(f".jp-Launcher-section:has(.jp-Launcher-sectionTitle:text-is('GPU kernels')) {NOTE}")
    expect(note).to_have_text(LAUNCHER_SENTENCE, timeout=90_000)
    expect(page.locator(NOTE)).to_have_count(1)  # once, under the GPU kernels heading only
    for theme in ("light", "dark"):
        if theme == "dark":
            switch_theme(page, "JupyterLab Dark")
            expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
        expect(note).to_have_text(LAUNCHER_SENTENCE)
        readable(page, NOTE)
        shot = artifacts / f"right-sizing-launcher-{theme}.png"
        page.locator(".jp-Launcher-section:has(.jp-Launcher-sectionTitle:text-is('GPU kernels'))").screenshot(path=str(shot))
        save_docs_screenshot(shot, f"right-sizing-launcher-{theme}.png")
    switch_theme(page, "JupyterLab Light")
