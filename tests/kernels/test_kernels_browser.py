"""A student's JupyterLab behind the hub, on a CPU server, with GPU kernels: chromium sees the GPU
kernels in the launcher, each GPU kernel's site in the GPU panel, and the active notebook's
kernel site in the status bar. The federation runs on its own loop in a thread (Playwright's
sync API owns the main thread's loop)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.sync_api import Page, expect

from browser.test_hub_form import LoopThread
from jupyter_gpuburst.sim.testing import running_federation
from spawner.harness import Hub

from .test_kernels_integration import KERNEL_HUB

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(240)]

PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
STUDENT = "alice"
NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "1 + 1"}],
    "metadata": {"kernelspec": {"name": "gpuburst-gpu-1", "display_name": "Python 3 (1 GPU)", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


@dataclass
class KernelSite:
    hub: Hub
    loop: LoopThread
    kernel_id: str

    def server_api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async def call() -> tuple[int, Any]:
            url = f"{self.hub.url}/user/{STUDENT}/api{path}"
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
                async with http.request(method, url, json=body, headers={"Authorization": f"token {self.hub.token}"}) as response:
                    text = await response.text()
                    return response.status, (json.loads(text) if text else None)

        return self.loop.run(call(), timeout=150)


@pytest.fixture(scope="module")
def kernel_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSite]:
    base = tmp_path_factory.mktemp("kernels-browser")
    (base / "hub").mkdir()
    loop = LoopThread()
    federation = running_federation(state_dir=base / "sim", kubeconfig=base / "kubeconfig")
    fed: Any = None
    hub: Hub | None = None
    try:
        fed = loop.run(federation.__aenter__())
        hub = Hub(base / "hub", base / "kubeconfig", KERNEL_HUB + '\nc.Spawner.default_url = "/lab"\n')
        hub.start()
        loop.run(hub.wait_up(timeout=90))
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "cpu"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))
        site = KernelSite(hub, loop, "")
        status, kernel = site.server_api("POST", "/kernels", {"name": "gpuburst-gpu-1"})
        assert status == 201, (kernel, hub.log())
        site.kernel_id = kernel["id"]
        status, _ = site.server_api("PUT", "/contents/gpu.ipynb", {"type": "notebook", "format": "json", "content": NOTEBOOK})
        assert status in (200, 201)
        yield site
    finally:
        try:
            if hub is not None:
                loop.run(hub.stop(), timeout=60)
            if fed is not None:
                loop.run(federation.__aexit__(None, None, None), timeout=60)
        finally:
            loop.close()


def test_lab_shows_gpu_kernels_where_they_run(page: Page, kernel_site: KernelSite, artifacts: Path) -> None:
    site = kernel_site
    page.set_default_timeout(60_000)
    page.goto(f"{site.hub.url}/hub/login?next=/user/{STUDENT}/lab")
    page.locator("#username_input").fill(STUDENT)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    page.wait_for_url(f"**/user/{STUDENT}/lab**")
    expect(page.locator(".jp-LauncherCard", has_text="Python 3 (1 GPU)").first).to_be_visible(timeout=90_000)

    # the GPU panel lists the running GPU kernel with its site and node
    page.locator(STATUS).click()
    row = page.locator(f"{PANEL} .jp-GpuBurst-gpuKernels tr[data-kernel-id='{site.kernel_id}']")
    expect(row).to_contain_text("origin")
    expect(row).to_contain_text("origin-gpu")
    expect(row).to_contain_text("1 × gpu")

    # a notebook whose kernel is a GPU kernel: the status bar says where that kernel runs
    page.goto(f"{site.hub.url}/user/{STUDENT}/lab/tree/gpu.ipynb")
    expect(page.locator(".jp-GpuBurst-kernelStatusText")).to_have_text("GPU kernel: origin", timeout=120_000)
    page.screenshot(path=str(artifacts / "lab-gpu-kernels.png"))
