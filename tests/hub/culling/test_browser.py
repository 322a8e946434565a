"""A student's JupyterLab behind the hub, on a GPU server the culler watches: the GPU panel and
the status bar warn that the idle GPU goes back soon, one click on Keep keeps it, and the
warning reads in the light and the dark theme. Screenshots for docs/screenshots come from here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import assert_readable, save_docs_screenshot, switch_theme
from helpers.hub import Hub
from helpers.hubsite import federation_and_hub
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
WARNING = f"{PANEL} .jp-GpuBurst-cullWarning"
STUDENT = "alice"
# the warning shows from 5 s of idleness; the stop would come at 60 s, after the test
CULLING = """
c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
c.Spawner.default_url = "/lab"
c.GPUCullingSettings.enabled = True
c.GPUCullingSettings.period_seconds = 1
c.GPUCullingSettings.timeout_seconds = 60
c.GPUCullingSettings.warning_seconds = 55
c.GPUCullingSettings.keep_limit = 2
from jupyter_gpuburst.hub import install
install(c)
"""


@pytest.fixture(scope="module")
def gpu_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with federation_and_hub(tmp_path_factory.mktemp("culling-browser"), CULLING) as (loop, _, hub):
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "gpu1"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))
        yield hub


def log_in(page: Page, hub: Hub) -> None:
    page.set_default_timeout(60_000)
    page.goto(f"{hub.url}/hub/login?next=/user/{STUDENT}/lab")
    page.locator("#username_input").fill(STUDENT)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    page.wait_for_url(f"**/user/{STUDENT}/lab**")
    try:
        page.get_by_role("button", name="No", exact=True).click(timeout=3_000)
    except Exception:  # noqa: BLE001 - not asked: nothing to dismiss
        pass


def test_idle_gpu_warning_and_keep_in_light_and_dark(page: Page, gpu_hub: Hub, artifacts: Path) -> None:
    log_in(page, gpu_hub)
    page.locator(STATUS).click()
    warning = page.locator(WARNING)
    expect(warning).to_contain_text(re.compile(r"^GPU idle for \d+ s: this server stops in \d+ s"), timeout=45_000)
    # the status bar says it too, and opens the panel
    expect(page.locator("button.jp-GpuBurst-cullStatus")).to_have_text(re.compile(r"this server stops in"))
    assert_readable(warning, dark=False)
    page.locator(PANEL).screenshot(path=str(artifacts / "culling-warning-light.png"))
    save_docs_screenshot(artifacts / "culling-warning-light.png", "culling-warning-light.png")

    # one click on Keep: the idle time starts again, and the panel says how many keeps are left
    warning.get_by_role("button", name="Keep").click()
    expect(page.locator(f"{PANEL} .jp-GpuBurst-culling")).to_contain_text("kept: the idle time starts again (1 keeps left)")

    switch_theme(page, "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    # the next warning (at the next refresh) offers the last Keep; its text stands out in dark
    expect(warning.get_by_role("button", name="Keep")).to_be_visible(timeout=45_000)
    assert_readable(warning, dark=True)
    page.locator(PANEL).screenshot(path=str(artifacts / "culling-warning-dark.png"))
    save_docs_screenshot(artifacts / "culling-warning-dark.png", "culling-warning-dark.png")
    warning.get_by_role("button", name="Keep").click()
    # no keeps left: the next warning says the GPU goes back, with no Keep
    expect(warning).to_contain_text("Keep was used as often as allowed", timeout=45_000)
    expect(warning.get_by_role("button", name="Keep")).to_have_count(0)
    switch_theme(page, "JupyterLab Light")


KERNEL_CULLING = """
c.Spawner.default_url = "/lab"
c.GPUCullingSettings.period_seconds = 1
c.GPUCullingSettings.kernel_profiles = {"gpu-1": {"enabled": True, "timeout_seconds": 35, "warning_seconds": 30}}
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.load_roles.append({"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "users": ["alice"]})
c.GPUKernelSettings.extra_env = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
"""
# The cell keeps the (simulated) GPU busy for two of the kernel's one-second samples, so the idle
# time runs from the cell's end, when the test opens the panel. A cell too short to be sampled
# left it counting from the kernel's start: on a loaded machine the first output came late, and
# the kernel was stopped before the panel opened, with its 30 s of warning missed.
NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "import time\ntime.sleep(2)\nprint('on a GPU')",
        }
    ],
    "metadata": {"kernelspec": {"name": "gpuburst-gpu-1", "display_name": "Python 3 (1 GPU)", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture(scope="module")
def kernel_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    import json

    import aiohttp

    with federation_and_hub(tmp_path_factory.mktemp("culling-kernels-browser"), KERNEL_CULLING) as (loop, _, hub):
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "cpu"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))

        async def put() -> int:
            url = f"{hub.url}/user/{STUDENT}/api/contents/train.ipynb"
            async with aiohttp.ClientSession() as http:
                body = {"type": "notebook", "format": "json", "content": NOTEBOOK}
                async with http.put(url, data=json.dumps(body), headers={"Authorization": f"token {hub.token}"}) as response:
                    return response.status

        assert loop.run(put()) in (200, 201)
        yield hub


def test_a_notebook_hears_why_its_idle_gpu_kernel_was_stopped(page: Page, kernel_hub: Hub, artifacts: Path) -> None:
    log_in(page, kernel_hub)
    page.goto(f"{kernel_hub.url}/user/{STUDENT}/lab/tree/train.ipynb")
    expect(page.locator(".jp-GpuBurst-kernelStatusText")).to_have_text("GPU kernel: origin", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")
    expect(page.locator(".jp-OutputArea-output", has_text="on a GPU")).to_be_visible(timeout=120_000)
    # the GPU panel warns about the notebook's kernel by the notebook's name
    page.locator(STATUS).click()
    expect(page.locator(WARNING)).to_contain_text(re.compile(r"GPU idle for \d+ s: the kernel of train\.ipynb stops in"), timeout=60_000)
    # then the kernel is stopped, and the notebook's window says why and how to start again
    # a notification over the notebook, and the panel's note in full
    toast = page.get_by_role("alert").filter(has_text="This GPU kernel was stopped because its GPU was idle")
    expect(toast.first).to_be_visible(timeout=60_000)
    note = page.locator(f"{PANEL} .jp-GpuBurst-cullStopped")
    expect(note).to_contain_text("This GPU kernel was stopped because its GPU was idle for")
    expect(note).to_contain_text("Restart the kernel to start it again on a free GPU.")
    # shut down by its server, not died: no kernel is running (the server's shutdown reaches the
    # notebook's toolbar a moment after the note), and no "Kernel Restarting" dialog came
    expect(page.locator(".jp-Toolbar-kernelName")).to_have_text("No Kernel", timeout=30_000)
    expect(page.get_by_role("dialog")).to_have_count(0)
    page.screenshot(path=str(artifacts / "culling-kernel-stopped.png"))
