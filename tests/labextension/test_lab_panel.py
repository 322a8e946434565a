"""The GPU panel and status bar item in a real JupyterLab, against the simulated backend."""

from __future__ import annotations

import re
import time

import pytest
from helpers.browser import LabServer
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

DONOR = "donor-1"
CLUSTER = "9f1c2e4a-7b3d-4c55-a1e2-0d6f8b9c3a71"
NODE = "liqo-donor-1"
REASON = "All 2 GPUs on the origin are busy; starting on donor-1 (3 of 8 GPUs free there)."
SCRATCH = "This server runs on donor-1, but your home directory stays on the origin: it is not mounted here."
SIM_GPUS = 2

PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"


@pytest.fixture(scope="module")
def donor_lab(start_lab) -> LabServer:
    """A server placed on a donor, with two simulated GPUs."""
    return start_lab(
        {
            "JUPYTER_GPUBURST_BACKEND": "simulated",
            "JUPYTER_GPUBURST_SIM_GPUS": str(SIM_GPUS),
            "JUPYTER_GPUBURST_SITE": DONOR,
            "JUPYTER_GPUBURST_CLUSTER": CLUSTER,
            "JUPYTER_GPUBURST_NODE": NODE,
            "JUPYTER_GPUBURST_REASON": REASON,
            "JUPYTER_GPUBURST_GPU_RESOURCE": "nvidia.com/gpu",
            "JUPYTER_GPUBURST_GPU_COUNT": str(SIM_GPUS),
            "JUPYTER_GPUBURST_STORAGE": "scratch",
            "JUPYTER_GPUBURST_STORAGE_MESSAGE": SCRATCH,
        },
        "donor",
    )


@pytest.fixture(scope="module")
def busy_kernel(donor_lab: LabServer):
    """A notebook session whose kernel stays busy: the simulated GPU it is pinned to gets load."""
    session = donor_lab.api(
        "POST",
        "api/sessions",
        {"path": "experiments/train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": "python3"}},
    )
    donor_lab.execute(session["kernel"]["id"], "import time\ntime.sleep(120)")
    yield session
    donor_lab.api("DELETE", f"api/sessions/{session['id']}")


# JupyterLab's start ends by focusing the main area (the restored widget, or the launcher it
# opens once the file browser has listed the home directory, seconds after the status bar
# shows): a key pressed before that can land on the widget it focuses.
MAIN_AREA_FOCUSED = "() => !!(document.activeElement && document.activeElement.closest('#jp-main-dock-panel'))"


def open_lab(page: Page, server: LabServer) -> None:
    page.goto(server.lab_url)
    expect(page.locator(STATUS)).to_be_visible(timeout=45_000)
    page.wait_for_function(MAIN_AREA_FOCUSED, timeout=45_000)


def open_panel(page: Page) -> None:
    """Open the panel from the status bar with the keyboard (focus + Enter), as a user could."""
    page.locator(STATUS).focus()
    expect(page.locator(STATUS)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(PANEL)).to_be_visible()


def close_panel(page: Page) -> None:
    """Collapse the sidebar by clicking the panel's (active) tab."""
    page.locator(f".jp-SideBar [data-id='{PANEL[1:]}']").click()
    expect(page.locator(PANEL)).to_be_hidden()


def test_status_bar_shows_site_and_utilization(page: Page, donor_lab: LabServer) -> None:
    open_lab(page, donor_lab)
    status = page.locator(STATUS)
    expect(status).to_have_text(re.compile(rf"^{DONOR} · GPU \d+ %$"), timeout=15_000)
    label = status.get_attribute("aria-label") or ""
    assert f"Running on {DONOR}, a donor cluster." in label and "Simulated data" in label
    expect(page.locator(PANEL)).to_be_hidden()


def test_panel_shows_placement_and_live_charts(page: Page, donor_lab: LabServer, busy_kernel, artifacts) -> None:
    open_lab(page, donor_lab)
    open_panel(page)
    panel = page.locator(PANEL)
    where = panel.locator(".jp-GpuBurst-where")
    expect(where.locator("dd[data-field=site]")).to_have_text(DONOR)
    expect(where.locator("dd[data-field=cluster]")).to_have_text(CLUSTER)
    expect(where.locator("dd[data-field=node]")).to_have_text(NODE)
    expect(where.locator("dd[data-field=gpu]")).to_contain_text(f"{SIM_GPUS} × NVIDIA")
    expect(where.locator(".jp-GpuBurst-reason")).to_contain_text(REASON)
    # the home directory did not follow the server: said beside where it runs, marked
    expect(where.locator(".jp-GpuBurst-storage-lost[data-kind=scratch]")).to_have_text(f"Files: {SCRATCH}")
    expect(panel.locator(".jp-GpuBurst-simulated")).to_have_text("simulated data")
    expect(panel.locator(".jp-GpuBurst-gpu")).to_have_count(SIM_GPUS)

    # The busy kernel loads one simulated GPU: its utilization leaves zero.
    util_values = panel.locator(".jp-GpuBurst-chart-utilization .jp-GpuBurst-chartValue")
    expect(util_values.filter(has_text=re.compile(r"^([1-9]\d*) %$"))).not_to_have_count(0, timeout=20_000)
    line = panel.locator(".jp-GpuBurst-chart-utilization path.jp-GpuBurst-line").first
    expect(line).to_have_attribute("d", re.compile(r"^M"), timeout=10_000)
    first = line.get_attribute("d")
    # Samples arrive once a second over the stream; the plotted series must move with them.
    deadline = time.monotonic() + 10
    while line.get_attribute("d") == first and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert line.get_attribute("d") != first, "utilization chart did not change over 10 s"
    expect(panel.locator(".jp-GpuBurst-connection")).to_have_count(0)

    panel.screenshot(path=str(artifacts / "panel-light.png"))
    page.screenshot(path=str(artifacts / "lab-light.png"))


def test_running_kernel_appears_in_kernel_list(page: Page, donor_lab: LabServer, busy_kernel) -> None:
    open_lab(page, donor_lab)
    open_panel(page)
    row = page.locator(f"{PANEL} .jp-GpuBurst-kernels tr[data-kernel-id='{busy_kernel['kernel']['id']}']")
    expect(row).to_be_visible(timeout=30_000)
    expect(row.locator("td").first).to_have_text("train.ipynb", timeout=15_000)
    expect(row.locator("td").nth(1)).to_have_text(re.compile(r"^\d+$"), timeout=15_000)
    expect(row.locator("td").nth(2)).to_have_text(re.compile(r"\d (B|KiB|MiB|GiB)$"))
    expect(row.locator("td").first).to_have_attribute("title", "experiments/train.ipynb")


def test_dark_theme_renders(page: Page, donor_lab: LabServer, busy_kernel, artifacts) -> None:
    themes = "lab/api/settings/@jupyterlab/apputils-extension:themes"
    donor_lab.api("PUT", themes, {"raw": '{"theme": "JupyterLab Dark"}'})
    try:
        open_lab(page, donor_lab)
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
        open_panel(page)
        panel = page.locator(PANEL)
        expect(panel.locator(".jp-GpuBurst-gpu")).to_have_count(SIM_GPUS)
        background = panel.evaluate("el => getComputedStyle(el).backgroundColor")
        red, green, blue = (int(v) for v in re.findall(r"\d+", background)[:3])
        assert red + green + blue < 3 * 96, f"panel background {background} is not dark"
        text = panel.locator(".jp-GpuBurst-site").evaluate("el => getComputedStyle(el).color")
        assert text != background
        page.wait_for_timeout(1500)  # let a couple of samples draw
        panel.screenshot(path=str(artifacts / "panel-dark.png"))
    finally:
        donor_lab.api("PUT", themes, {"raw": "{}"})


def test_no_gpu_state_and_connection_lost(page: Page, start_lab, artifacts) -> None:
    server = start_lab({"JUPYTER_GPUBURST_BACKEND": "none"}, "nogpu")
    open_lab(page, server)
    status = page.locator(STATUS)
    expect(status).to_have_text("standalone · no GPU", timeout=15_000)
    open_panel(page)
    panel = page.locator(PANEL)
    nogpu = panel.locator(".jp-GpuBurst-nogpu")
    expect(nogpu).to_contain_text("No GPU visible")
    reason = server.api("GET", "api/gpuburst/gpus")["reason"]
    assert reason, "backend 'none' must say why no GPU is visible"
    expect(nogpu).to_contain_text(reason)
    expect(panel.locator(".jp-GpuBurst-where dd[data-field=site]")).to_have_text("standalone")
    expect(panel.locator(".jp-GpuBurst-gpu")).to_have_count(0)
    expect(panel.locator(".jp-GpuBurst-simulated")).to_have_count(0)
    panel.screenshot(path=str(artifacts / "panel-nogpu.png"))

    server.stop()
    # the server said so as it stopped, before the connection was found lost (no hub here:
    # nowhere to send the student)
    expect(page.get_by_role("alert").filter(has_text="This server is stopping.")).to_be_visible(timeout=10_000)
    expect(panel.locator(".jp-GpuBurst-connection")).to_contain_text("Connection lost, retrying", timeout=15_000)
    panel.screenshot(path=str(artifacts / "panel-connection-lost.png"))


# The panel reads its stream from a fetch() response; a stream is open from the request until
# its signal aborts (the client aborts every stream it leaves, on purpose or not), or until
# the server ends it (then the client connects again: without counting that end, a stream the
# server closed under load would count as open for good).
TRACK_STREAMS = """
(() => {
  const native = window.fetch;
  window.__streams = { urls: [], log: [] };
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : input.url;
    if (url.includes('/api/gpuburst/stream')) {
      const signal = input instanceof Request ? input.signal : init && init.signal;
      window.__streams.urls.push(url);
      const t0 = Math.round(performance.now());
      window.__streams.log.push([t0, 'open']);
      let ended = false;
      const end = how => { if (!ended) { ended = true; window.__streams.log.push([Math.round(performance.now()), `end ${t0}: ${how}`]); } };
      if (signal) { signal.addEventListener('abort', () => end('aborted')); }
      return native.apply(this, arguments).then(response => {
        if (!response.body) { end('no body'); return response; }
        const [body, watched] = response.body.tee();
        const reader = watched.getReader();
        const drain = () => reader.read().then(r => (r.done ? end('done') : drain()), () => end('errored'));
        drain();
        return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
      }, e => { end('failed'); throw e; });
    }
    return native.apply(this, arguments);
  };
})();
"""
# open is what the log opened and has not ended
OPEN_STREAMS = "() => window.__streams.log.reduce((n, e) => n + (e[1] === 'open') - e[1].startsWith('end '), 0)"
# what a failure needs to explain itself: each stream's open and end (ms since the page loaded),
# whether the panel is shown, and if not, which of its ancestors hides it, and the status bar
# item's text (a live item, one that reads the stream, shows utilization once a sample came)
STREAMS_STORY = """() => {
  const panel = document.querySelector('#jupyter-gpuburst-panel');
  const status = document.querySelector('button.jp-GpuBurst-status');
  const hiders = [];
  for (let e = panel; e; e = e.parentElement) {
    if (e.classList.contains('lm-mod-hidden')) { hiders.push(e.id || e.className); }
  }
  return {
    now: Math.round(performance.now()), log: window.__streams.log, visibility: document.visibilityState,
    panel: panel ? { width: panel.getBoundingClientRect().width, hiddenBy: hiders } : 'absent',
    status: status ? status.textContent : 'absent'
  };
}"""
STREAM_URLS = "() => window.__streams.urls.length"
LINGER_S = 10  # DEFAULT_LINGER_MS in labextension/src/client.ts


@pytest.mark.timeout(180)
def test_stream_runs_only_while_needed(page: Page, donor_lab: LabServer) -> None:
    """With the status bar showing the site only, the stream is open while the panel shows, and
    for the linger after: reopening the panel within it reads the same stream."""
    plugin = "lab/api/settings/jupyter-gpuburst:plugin"
    page.add_init_script(TRACK_STREAMS)
    open_lab(page, donor_lab)
    page.wait_for_function(f"() => ({OPEN_STREAMS})() === 1")  # the live status bar item needs it
    donor_lab.api("PUT", plugin, {"raw": '{"statusBarUtilization": false}'})
    try:
        page.reload()
        expect(page.locator(STATUS)).to_have_text(DONOR, timeout=45_000)
        page.wait_for_function(MAIN_AREA_FOCUSED, timeout=45_000)
        # the restored layout may show the panel, possibly only after the status bar is up
        deadline = time.monotonic() + 30 + LINGER_S
        while page.evaluate(OPEN_STREAMS) != 0 and time.monotonic() < deadline:
            if page.locator(PANEL).is_visible():
                close_panel(page)
                page.evaluate("() => window.__streams.log.push([Math.round(performance.now()), 'the test closed the panel'])")
                # a panel the restorer showed late needed the stream until now: its linger runs from here
                deadline = max(deadline, time.monotonic() + LINGER_S + 10)
            page.wait_for_timeout(250)
        assert page.evaluate(OPEN_STREAMS) == 0, f"a stream stayed open with nothing needing it: {page.evaluate(STREAMS_STORY)}"
        open_panel(page)
        page.wait_for_function(f"() => ({OPEN_STREAMS})() === 1")
        expect(page.locator(f"{PANEL} .jp-GpuBurst-gpu")).to_have_count(SIM_GPUS)
        requests = page.evaluate(STREAM_URLS)
        close_panel(page)
        page.wait_for_timeout(2000)
        assert page.evaluate(OPEN_STREAMS) == 1, "the stream closed before its linger ran out"
        open_panel(page)
        page.wait_for_timeout(1000)
        assert page.evaluate(OPEN_STREAMS) == 1
        assert page.evaluate(STREAM_URLS) == requests, "reopening the panel within the linger reconnected"
        close_panel(page)
        page.wait_for_function(f"() => ({OPEN_STREAMS})() === 0", timeout=(LINGER_S + 5) * 1000)
        page.wait_for_timeout(500)
        assert page.evaluate(OPEN_STREAMS) == 0, "stream reopened while nothing needs it"
        # the story a failure above would print: every stream opened has ended, the panel hidden
        story = page.evaluate(STREAMS_STORY)
        assert story["panel"]["hiddenBy"] and sum(e[1] == "open" for e in story["log"]) == sum(e[1].startswith("end") for e in story["log"])
        urls = page.evaluate("() => window.__streams.urls")
        assert urls and not [u for u in urls if "token" in u], f"a token in a stream URL: {urls}"
    finally:
        donor_lab.api("PUT", plugin, {"raw": "{}"})
