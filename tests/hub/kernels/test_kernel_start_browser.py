"""A GPU kernel's start as a student meets it, in chromium behind the hub and its proxy: they
open a notebook (or a console) on a GPU kernel, type a cell and press Shift+Enter at once. The
kernel's pods here take over half a minute to answer (as an image pull or a queue would), and
one profile's pods never start. The cell waits with ``[*]`` while the status bar says where the
kernel is starting, then runs; a kernel that cannot start says why in the waiting cell. The
launcher offers each GPU kernel once, in its GPU kernels section."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import dismiss_news, log_in_to_lab, switch_theme
from helpers.hub import Hub
from helpers.hubsite import LoopThread, federation_and_hub
from helpers.kernels import KERNEL_HUB
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(300)]

START_DELAY_S = 35
GPU_CARD = ".jp-LauncherCard[data-category='GPU kernels']"
CODE = "import os; print(os.environ['JUPYTER_GPUBURST_SITE'])"
# a kernel pod answers only after START_DELAY_S; the "broken" profile's pods exit while starting
SLOW_KERNELS = f"""
# one student for the whole file, whose kernels outlive each test: no per-user limit to meet
c.GPUKernelSettings.max_kernels_per_user = 0
c.GPUKernelSettings.profiles = [
    {{"slug": "gpu-1", "display_name": "Python 3 (1 GPU)"}},
    {{"slug": "broken", "display_name": "Python 3 (broken GPU)", "image": "example.org/broken-kernel:1"}},
]

def slow_start(pod, placement):
    container = pod["spec"]["containers"][0]
    if container["image"].endswith("broken-kernel:1"):
        container["command"] = ["sh", "-c", "sleep 3; exit 3"]
    else:
        container["command"] = ["sh", "-c", "sleep {START_DELAY_S} && exec " + " ".join(container["command"])]
    return pod

c.GPUKernelSettings.modify_pod_hook = slow_start
c.Spawner.default_url = "/lab"
"""


STUDENT = "alice"


@dataclass
class KernelSite:
    hub: Hub
    loop: LoopThread


def log_in_to(page: Page, site: KernelSite, lab_path: str, landing: str) -> None:
    log_in_to_lab(page, site.hub.url, STUDENT, lab_path, landing)


@pytest.fixture(scope="module")
def slow_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSite]:
    base = tmp_path_factory.mktemp("kernel-start-browser")
    with federation_and_hub(base, KERNEL_HUB + SLOW_KERNELS) as (loop, _, hub):
        status, body = loop.run(hub.spawn(STUDENT, {"profile": "cpu"}))
        assert status in (201, 202), body
        loop.run(hub.wait_ready(STUDENT, timeout=90))
        yield KernelSite(hub, loop)


def type_and_run(page: Page, editor: str, code: str) -> None:
    """Click into the cell, type, Shift+Enter: no waiting for the kernel in between."""
    page.locator(editor).first.click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")


# the server's sessions answer late, as over a slow network: a run typed before the notebook's
# session exists must wait for it too, not only one typed while the kernel starts; and the page's
# first list of sessions comes late, so the notebook is still waiting for it (before it asks for
# its kernel) when the run comes, and JupyterLab starts a kernel for the run: that start must not
# be a second one that ends the first, and the run with it
SLOW_SESSION = """
const fetch0 = window.fetch;
let listed = false;
window.fetch = (input, init) => {
  const url = typeof input === 'string' ? input : input.url;
  const method = (init && init.method) || (typeof input === 'string' ? 'GET' : input.method);
  if (/\\/api\\/sessions/.test(url) && (method === 'POST' || (method === 'GET' && !listed))) {
    const late = method === 'POST' ? 3000 : 4000;
    listed = listed || method === 'GET';
    return new Promise(resolve => setTimeout(resolve, late)).then(() => fetch0(input, init));
  }
  return fetch0(input, init);
};
"""


def test_a_cell_run_while_the_gpu_kernel_starts_runs_once_it_is_ready(page: Page, slow_site: KernelSite, artifacts: Path) -> None:
    page.add_init_script(SLOW_SESSION)
    log_in_to(page, slow_site, "lab?reset", landing="lab**")

    # each GPU kernel is offered once: in the GPU kernels section, with what is free and where
    card = page.locator(GPU_CARD, has_text=re.compile(r"^Python 3 \(1 GPU\) ·"))
    expect(card).to_have_text("Python 3 (1 GPU) · 2 free on origin, 8 on donors", timeout=90_000)
    for section in ("Notebook", "Console"):
        plain = page.locator(f".jp-LauncherCard[data-category='{section}']")
        expect(plain.first).to_be_visible()
        expect(plain.filter(has_text="GPU")).to_have_count(0)
    dismiss_news(page)

    card.click()
    type_and_run(page, ".jp-Notebook .jp-Cell .jp-InputArea-editor", CODE)
    # the cell waits for the kernel, and the status bar says where it is starting
    prompt = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").first
    expect(prompt).to_have_text("[*]:", timeout=10_000)
    starting = page.locator(".jp-GpuBurst-kernelStarting")
    expect(starting).to_have_text(re.compile(r"^Starting a GPU kernel on origin…"), timeout=20_000)
    # ...and JupyterLab's own kernel status says it starts, neither "Connecting" nor "Unknown"
    lab_status = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^Python 3 \(1 GPU\) \| "))
    expect(lab_status).to_have_text("Python 3 (1 GPU) | Starting")
    page.screenshot(path=str(artifacts / "kernel-starting-light.png"))
    expect(prompt).to_have_text("[*]:")  # still waiting, not dropped
    # ...and runs once the kernel is ready, where the status bar then says it runs
    output = page.locator(".jp-Notebook .jp-OutputArea-output").first
    # (after the note a first cell gets about the kernel's files)
    expect(output).to_have_text(re.compile(r"(^|\n)origin\s*$"), timeout=(START_DELAY_S + 60) * 1000)
    expect(prompt).to_have_text("[1]:")
    expect(page.locator(".jp-GpuBurst-kernelStatusText")).to_have_text("GPU kernel: origin", timeout=20_000)
    expect(lab_status).to_have_text("Python 3 (1 GPU) | Idle")


def test_a_console_on_a_starting_gpu_kernel_runs_what_was_typed(page: Page, slow_site: KernelSite, artifacts: Path) -> None:
    # the console's session answers late too: its first kernel's arrival clears a console's cells
    page.add_init_script(SLOW_SESSION)
    log_in_to(page, slow_site, "lab?reset", landing="lab**")
    switch_theme(page, "JupyterLab Dark")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
    # a new console asks which kernel: the picker still lists the GPU kernels
    run_in_a_new_console(page, "Python 3 (1 GPU)")
    # the status bar says so in the dark theme too: light text on the dark bar
    starting = page.locator(".jp-GpuBurst-kernelStarting")
    expect(starting).to_have_text(re.compile(r"^Starting a GPU kernel on (origin|donor-1)…"), timeout=20_000)
    color = starting.evaluate("e => getComputedStyle(e).color")
    assert sum(int(v) for v in re.findall(r"\d+", color)[:3]) > 3 * 128, f"{color} is not light"
    lab_status = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^Python 3 \(1 GPU\) \| "))
    expect(lab_status).to_have_text("Python 3 (1 GPU) | Starting")
    page.screenshot(path=str(artifacts / "kernel-starting-dark.png"))
    output = page.locator(".jp-CodeConsole .jp-OutputArea-output").first
    expect(output).to_have_text(re.compile(r"(^|\n)(origin|donor-1)\s*$"), timeout=(START_DELAY_S + 60) * 1000)
    # what was typed ran once, in one cell that shows it, below the kernel's banner
    ran = page.locator(".jp-CodeConsole-content .jp-CodeCell")
    expect(ran).to_have_count(1)
    expect(ran.locator(".jp-InputArea-editor")).to_have_text(CODE)
    expect(ran.locator(".jp-InputPrompt")).to_have_text("[1]:")
    expect(page.locator(".jp-CodeConsole-content > .jp-CodeConsole-banner")).to_have_count(1)
    assert page.locator(".jp-CodeConsole-content > *").first.evaluate("e => e.classList.contains('jp-CodeConsole-banner')")
    page.screenshot(path=str(artifacts / "kernel-console-ran-dark.png"))


def run_in_a_new_console(page: Page, kernel: str) -> None:
    """A student opens File > New > Console, picks ``kernel`` and runs a line at once."""
    page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^New$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Console$")).click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("select").select_option(label=kernel)
    dialog.locator(".jp-mod-accept").click()
    type_and_run(page, ".jp-CodeConsole-promptCell .jp-InputArea-editor", CODE)


def run_in_a_broken_gpu_notebook(page: Page, site: KernelSite) -> None:
    """A student opens a notebook on the GPU kernel that cannot start and runs a cell at once."""
    log_in_to(page, site, "lab?reset", landing="lab**")
    card = page.locator(GPU_CARD, has_text=re.compile(r"^Python 3 \(broken GPU\)"))
    expect(card).to_be_visible(timeout=90_000)
    dismiss_news(page)
    card.click()
    type_and_run(page, ".jp-Notebook .jp-Cell .jp-InputArea-editor", CODE)


def test_a_gpu_kernel_that_cannot_start_says_why_in_the_waiting_cell(page: Page, slow_site: KernelSite) -> None:
    run_in_a_broken_gpu_notebook(page, slow_site)
    output = page.locator(".jp-Notebook .jp-OutputArea-output").first
    expect(output).to_contain_text("GPU kernel not started", timeout=60_000)
    expect(output).to_contain_text("the kernel exited while starting (exit code 3)")
    # JupyterLab's own dialog says the same, for a student who ran no cell
    expect(page.locator(".jp-Dialog")).to_contain_text("the kernel exited while starting")


# the notebook names its new session after its file only once the server's kernel is dead: a
# kernel refused at once, on a loaded server, dies before JupyterLab listens to it
SESSION_NAMED_LATE = """
const fetch0 = window.fetch;
window.fetch = async (input, init) => {
  const url = typeof input === 'string' ? input : input.url;
  const method = (init && init.method) || (typeof input === 'string' ? 'GET' : input.method);
  const session = /\\/api\\/sessions\\/([^/?]+)/.exec(url);
  if (session && method === 'PATCH') {
    const model = url.replace(/\\?.*/, '');
    // JupyterLab's own headers: a cookie-authenticated API request needs its XSRF token
    const headers = typeof input === 'string' ? init && init.headers : input.headers;
    for (let i = 0; i < 300; i++) {
      const reply = await fetch0(model, { headers });
      const kernel = reply.ok ? (await reply.json()).kernel : null;
      if (kernel && kernel.execution_state === 'dead') {
        window.__sessionNamedAfterDeath = true;
        await new Promise(resolve => setTimeout(resolve, 1500));
        break;
      }
      await new Promise(resolve => setTimeout(resolve, 200));
    }
  }
  return fetch0(input, init);
};
"""


def test_a_gpu_kernel_dead_before_its_notebook_listens_still_says_why(page: Page, slow_site: KernelSite) -> None:
    page.add_init_script(SESSION_NAMED_LATE)
    run_in_a_broken_gpu_notebook(page, slow_site)
    output = page.locator(".jp-Notebook .jp-OutputArea-output").first
    expect(output).to_contain_text("GPU kernel not started: the kernel exited while starting (exit code 3)", timeout=90_000)
    assert page.evaluate("() => window.__sessionNamedAfterDeath === true"), "the kernel did not die first"
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Error Starting Kernel")
    expect(dialog.locator(".jp-Dialog-body pre")).to_contain_text("the kernel exited while starting (exit code 3)")
    expect(dialog).to_have_count(1)
    dialog.get_by_role("button", name="Ok").click()
    # the dead kernel is dropped, as after a start that failed later
    expect(page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")).to_have_text("No Kernel", timeout=20_000)


def test_a_gpu_kernel_that_could_not_start_is_not_offered_again(page: Page, slow_site: KernelSite) -> None:
    """The kernel picker offers a new start of the notebook's GPU kernel, not the dead one."""
    run_in_a_broken_gpu_notebook(page, slow_site)
    expect(page.locator(".jp-Notebook .jp-OutputArea-output").first).to_contain_text("GPU kernel not started", timeout=60_000)
    page.locator(".jp-Dialog").get_by_role("button", name="Ok").click()
    # the dead kernel is gone, as after JupyterLab's Shut Down Kernel: the next run starts anew
    kernel_name = page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")
    expect(kernel_name).to_have_text("No Kernel", timeout=20_000)
    kernel_name.click()
    picker = page.locator(".jp-Dialog select")
    expect(picker.locator("option:checked")).to_have_text("Python 3 (broken GPU)")
    # a running kernel's option is titled with its notebook and kernel's name; none is the dead one's
    dead = picker.locator("option[title*='.ipynb'][title*='Kernel Name: Python 3 (broken GPU)']")
    expect(dead).to_have_count(0)
    page.locator(".jp-Dialog .jp-mod-reject").click()
    # nor does a new console's picker offer it
    page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^New$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Console$")).click()
    expect(picker.locator("option:checked")).not_to_have_text(re.compile(r"broken"))
    expect(dead).to_have_count(0)
    page.locator(".jp-Dialog .jp-mod-reject").click()


def test_the_gpu_panel_names_a_failed_gpu_kernel_and_says_why(page: Page, slow_site: KernelSite, artifacts: Path) -> None:
    log_in_to(page, slow_site, "lab?reset", landing="lab**")
    page.locator("button.jp-GpuBurst-status").click()
    # a console keeps its dead GPU kernel (and the reason in its cell) until it is closed
    run_in_a_new_console(page, "Python 3 (broken GPU)")
    # the console's cell says why, as a notebook's does
    output = page.locator(".jp-CodeConsole .jp-OutputArea-output").first
    expect(output).to_contain_text("GPU kernel not started: the kernel exited while starting (exit code 3)", timeout=60_000)
    page.locator(".jp-Dialog").get_by_role("button", name="Ok").click()
    expect(page.locator(".jp-GpuBurst-kernelStatusText")).to_have_text("GPU kernel failed")
    why = "failed: the kernel exited while starting (exit code 3)"
    # the Kernels card: the kernel as the launcher offered it, and why it failed
    row = page.locator("#jupyter-gpuburst-panel .jp-GpuBurst-kernels tbody tr", has_text="Python 3 (broken GPU) (console)")
    expect(row).to_contain_text(why, timeout=20_000)
    # ...and the GPU kernels card
    failed = page.locator("#jupyter-gpuburst-panel .jp-GpuBurst-gpuKernels .jp-GpuBurst-gpuKernelFailed")
    expect(failed).to_have_text(why, timeout=20_000)
    expect(
        page.locator("#jupyter-gpuburst-panel .jp-GpuBurst-gpuKernels tbody tr", has=page.locator(".jp-GpuBurst-gpuKernelFailed"))
    ).to_contain_text("Python 3 (broken GPU)")
    panel = page.locator("#jupyter-gpuburst-panel")
    expect(panel).not_to_contain_text("gpuburst-broken")
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        dark = theme.endswith("Dark")
        switch_theme(page, theme)  # (the theme is a setting: an earlier test may have left it dark)
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false" if dark else "true", timeout=20_000)
        # in the theme's error colour, which each theme makes readable on its own background
        for cell in (failed, row.locator("td.jp-GpuBurst-kernelFailed"), row.locator("span.jp-GpuBurst-kernelFailed")):
            expect(cell).to_have_css("color", theme_color(page, "--jp-error-color1"))
        panel.screenshot(path=str(artifacts / f"kernel-failed-panel-{'dark' if dark else 'light'}.png"))


def theme_color(page: Page, variable: str) -> str:
    """A theme variable's colour as computed styles give it (``rgb(...)``)."""
    script = """v => { const d = document.createElement('div');
        d.style.color = getComputedStyle(document.body).getPropertyValue(v).trim();
        document.body.append(d); const c = getComputedStyle(d).color; d.remove(); return c; }"""
    return page.evaluate(script, variable)


REOPENED = "reopened.ipynb"
BROKEN_NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CODE}],
    "metadata": {"kernelspec": {"name": "gpuburst-broken", "display_name": "Python 3 (broken GPU)", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def server_api(site: KernelSite, method: str, path: str, body: dict | None = None) -> Any:
    """The student's server's REST API, as the hub's admin service reaches it through the proxy."""
    import aiohttp

    async def call() -> Any:
        url = f"{site.hub.url}/user/{STUDENT}/api/{path}"
        async with aiohttp.ClientSession() as http:
            data = None if body is None else json.dumps(body)
            async with http.request(method, url, data=data, headers={"Authorization": f"token {site.hub.token}"}) as response:
                assert response.status < 300, (response.status, await response.text())
                text = await response.text()
                return json.loads(text) if text else None

    return site.loop.run(call())


def test_a_notebook_reopened_after_its_gpu_kernel_failed_offers_a_new_start(page: Page, slow_site: KernelSite) -> None:
    """The student leaves while the GPU kernel starts; it fails meanwhile. Reopened, the notebook
    says why and its kernel picker preselects a new start, not the dead kernel."""
    server_api(slow_site, "PUT", f"contents/{REOPENED}", {"type": "notebook", "format": "json", "content": BROKEN_NOTEBOOK})
    log_in_to(page, slow_site, f"lab/tree/{REOPENED}?reset", landing="lab/tree/**")
    kernel_name = page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")
    expect(kernel_name).to_have_text("Python 3 (broken GPU)", timeout=60_000)
    # the session is made: the student goes away before the kernel fails
    deadline = time.monotonic() + 60
    while not [s for s in server_api(slow_site, "GET", "sessions") if s["path"] == REOPENED]:
        assert time.monotonic() < deadline, "the notebook made no session"
        time.sleep(0.2)
    page.goto("about:blank")
    while True:
        sessions = [s for s in server_api(slow_site, "GET", "sessions") if s["path"] == REOPENED]
        if sessions and sessions[0]["kernel"]["execution_state"] == "dead":
            break
        assert time.monotonic() < deadline, f"the kernel did not fail: {sessions}"
        time.sleep(0.5)
    dead = sessions[0]["kernel"]["id"]

    page.goto(f"{slow_site.hub.url}/user/{STUDENT}/lab/tree/{REOPENED}")
    dialog = page.locator(".jp-Dialog")
    expect(dialog.locator(".jp-Dialog-body pre")).to_contain_text("the kernel exited while starting (exit code 3)", timeout=60_000)
    dialog.get_by_role("button", name="Ok").click()
    expect(kernel_name).to_have_text("No Kernel", timeout=20_000)
    kernel_name.click()
    picker = page.locator(".jp-Dialog select")
    expect(picker.locator("option:checked")).to_have_text("Python 3 (broken GPU)")
    expect(picker.locator(f"option[value*='{dead}']")).to_have_count(0)
    page.locator(".jp-Dialog .jp-mod-reject").click()


def test_a_notebook_whose_gpu_kernel_was_stopped_offers_a_new_start(page: Page, slow_site: KernelSite) -> None:
    """The server shuts the running GPU kernel down (as it does when the hub stops it: culling, a
    budget, an admin): the notebook reads No Kernel and its picker preselects a new start."""
    name = "stopped.ipynb"
    notebook = {
        **BROKEN_NOTEBOOK,
        "metadata": {"kernelspec": {"name": "gpuburst-gpu-1", "display_name": "Python 3 (1 GPU)", "language": "python"}},
    }
    server_api(slow_site, "PUT", f"contents/{name}", {"type": "notebook", "format": "json", "content": notebook})
    log_in_to(page, slow_site, f"lab/tree/{name}?reset", landing="lab/tree/**")
    # the cell shows once the file has loaded, but the notebook asks for its kernel only after
    # making the file's checkpoint: a run before then meets JupyterLab's Select Kernel dialog
    kernel_name = page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName")
    expect(kernel_name).to_have_text("Python 3 (1 GPU)", timeout=60_000)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-Notebook .jp-OutputArea-output").first
    expect(output).to_have_text(re.compile(r"(^|\n)(origin|donor-1)\s*$"), timeout=(START_DELAY_S + 60) * 1000)
    session = next(s for s in server_api(slow_site, "GET", "sessions") if s["path"] == name)
    server_api(slow_site, "DELETE", f"kernels/{session['kernel']['id']}")
    expect(kernel_name).to_have_text("No Kernel", timeout=30_000)
    kernel_name.click()
    picker = page.locator(".jp-Dialog select")
    expect(picker.locator("option:checked")).to_have_text("Python 3 (1 GPU)")
    expect(picker.locator(f"option[value*='{session['kernel']['id']}']")).to_have_count(0)
    page.locator(".jp-Dialog .jp-mod-reject").click()
