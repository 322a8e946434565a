"""A GPU kernel that waits in the hub's queue, as a student meets it in chromium behind the hub:
they open a notebook on a GPU kernel while every GPU is taken, type a cell and press
Shift+Enter at once. The status bar and the GPU panel say their place in line; the panel's
Cancel shuts the kernel down, the waiting cell says why it did not run, and the hub keeps
nothing for it (light and dark)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import dismiss_news, log_in_to_lab, switch_theme
from helpers.federation import DONOR, occupy
from helpers.hubsite import federation_and_hub
from helpers.kernels import KERNEL_HUB
from playwright.sync_api import Page, expect

from jupyter_gpuburst.core import keys

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(300)]

STUDENT = "alice"
PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
GPU_CARD = ".jp-LauncherCard[data-category='GPU kernels']"
CONFIG = (
    KERNEL_HUB
    + """
c.GPUKernelSettings.queue_when_full = True
c.Spawner.default_url = "/lab"
"""
)


class Site:
    def __init__(self, loop: Any, fed: Any, hub: Any) -> None:
        self.loop, self.fed, self.hub = loop, fed, hub

    def queued_or_held(self) -> int:
        """What the hub holds for waiting requests: places in line and reservations."""
        status, capacity = self.loop.run(self.hub.capacity())
        assert status == 200, capacity
        return capacity["queue_length"] + capacity["reservations"]

    def kernel_pods(self) -> list[dict]:
        selector = f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}"
        items, _ = self.fed.origin.store.list("pods", "default", label_selector=selector)
        return items


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    async def fill(fed: Any) -> None:
        occupy(fed, "origin-gpu", 2, "hog")
        occupy(fed, DONOR, 8, "donor-hog")

    with federation_and_hub(tmp_path_factory.mktemp("kernel-queue-browser"), CONFIG, fill) as (loop, fed, hub):
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "cpu"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))
        yield Site(loop, fed, hub)


def lightness(css_color: str) -> float:
    return sum(int(v) for v in re.findall(r"\d+", css_color)[:3]) / (3 * 255)


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_a_gpu_kernel_waiting_in_line_says_its_place_and_cancel_withdraws_it(page: Page, site: Any, theme: str, artifacts: Path) -> None:
    log_in_to_lab(page, site.hub.url, STUDENT, "lab?reset", landing="lab**")
    dark = theme.endswith("Dark")
    if dark:
        switch_theme(page, theme)
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    card = page.locator(GPU_CARD, has_text=re.compile(r"^Python 3 \(1 GPU\) ·"))
    expect(card).to_be_visible(timeout=90_000)
    dismiss_news(page)
    card.click()
    page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
    page.keyboard.type("print('ran')")
    page.keyboard.press("Shift+Enter")

    prompt = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").first
    expect(prompt).to_have_text("[*]:", timeout=30_000)
    waiting = page.locator(".jp-GpuBurst-kernelStarting")
    expect(waiting).to_have_text("Waiting for a GPU: next in line, wait time unknown", timeout=30_000)
    # readable on the theme's status bar
    assert (lightness(waiting.evaluate("e => getComputedStyle(e).color")) > 0.5) == dark

    page.locator(STATUS).click()
    row = page.locator(f"{PANEL} .jp-GpuBurst-gpuKernels tbody tr").first
    expect(row).to_contain_text("Waiting for a GPU: next in line, wait time unknown", timeout=30_000)
    cancel = row.get_by_role("button", name="Cancel", exact=True)
    expect(cancel).to_be_visible()
    # its word on one line, in a panel as narrow as the sidebar's default
    assert cancel.evaluate("e => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight")
    box = cancel.bounding_box()
    assert box is not None and box["height"] < 40, box
    background = page.locator(PANEL).evaluate("e => getComputedStyle(e).backgroundColor")
    assert (lightness(background) < 0.5) == dark, background
    name = "light" if not dark else "dark"
    page.locator(PANEL).screenshot(path=str(artifacts / f"kernel-queue-{name}.png"))
    assert site.queued_or_held() == 1

    cancel.click()
    # the cell that waited is not run and no longer waits; where JupyterLab saw the kernel's
    # end before it went (it may only see it gone: "No Kernel"), the cell and its dialog say why
    expect(prompt).to_have_text("[ ]:", timeout=60_000)
    outputs = page.locator(".jp-Notebook .jp-OutputArea-output")
    if outputs.count():
        expect(outputs.first).to_have_text("GPU kernel not started: it was shut down before it started")
    for button in page.locator(".jp-Dialog .jp-mod-accept").all():
        button.click()
    # nothing is left at the hub: no place in line, nothing reserved, no pod
    expect(page.locator(f"{PANEL} .jp-GpuBurst-cancelWait")).to_have_count(0, timeout=30_000)
    assert site.queued_or_held() == 0
    assert site.kernel_pods() == []
