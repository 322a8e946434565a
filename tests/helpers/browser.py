"""Browser tests: JupyterLab with the GPU panel, driven through Playwright and Debian's chromium."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from jupyter_gpuburst.hub.ports import free_port

REPO = Path(__file__).resolve().parents[2]
# Chromium's headless build, as Playwright runs headless by default: no window system, less to
# start and draw than the full browser's headless mode (test_lab_panel.py: 21 CPU-s, not 24; 56 s, not 62)
CHROMIUM_PACKAGE = "chromium-headless-shell"
CHROMIUM = Path(os.environ.get("GPUBURST_CHROMIUM", f"/usr/bin/{CHROMIUM_PACKAGE}"))
ARTIFACTS = REPO / "test-artifacts" / "browser"
DOCS_SCREENSHOTS = REPO / "docs" / "screenshots"
START_TIMEOUT_S = 60.0

# No telemetry, no updates, no news: the page must not reach anything but the test server.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _install_chromium() -> str | None:
    """Install Debian's chromium-headless-shell when missing (as `make setup` does); returns why it
    could not."""
    if CHROMIUM.exists():
        return None
    if shutil.which("apt-get") is None:
        return f"apt-get is not available to install Debian's {CHROMIUM_PACKAGE}"
    if os.geteuid() != 0:
        return f"{CHROMIUM} is missing and installing it needs root: run `make setup`"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", CHROMIUM_PACKAGE]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-300:]}"
    return None if CHROMIUM.exists() else f"{CHROMIUM_PACKAGE} installed but {CHROMIUM} not found"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """pytest-playwright launch options: Debian's chromium instead of a downloaded browser.

    Chromium's own log goes to chromium.log in the run's temporary folder, where a failing
    test's report finds it (helpers/failure_logs): a page whose every request failed at once,
    with nothing in any server's log, is the browser's own matter (its network service)."""
    why = _install_chromium()
    if why:
        pytest.skip(f"Debian chromium unavailable: {why}")
    log = tmp_path_factory.getbasetemp() / "chromium.log"
    return {
        **browser_type_launch_args,
        "executable_path": str(CHROMIUM),
        "args": [*CHROMIUM_ARGS, "--enable-logging", f"--log-file={log}", "--v=0"],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1280, "height": 860}}


@dataclass
class LabServer:
    """A running `jupyter lab` with the extension; `url` ends without a slash."""

    url: str
    token: str
    root: Path
    proc: subprocess.Popen
    log_path: Path
    extra: dict = field(default_factory=dict)

    @property
    def lab_url(self) -> str:
        return f"{self.url}/lab?token={self.token}"

    def api(self, method: str, path: str, body: dict | None = None) -> dict | None:
        request = urllib.request.Request(  # noqa: S310 - the test's own server
            f"{self.url}/{path.lstrip('/')}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the test's own server
            raw = response.read()
        return json.loads(raw) if raw else None

    def execute(self, kernel_id: str, code: str) -> None:
        """Send `code` to a kernel and return once it reports busy (the code keeps running)."""
        # Playwright's sync API owns this thread's event loop; the websocket gets its own thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, _execute(self, kernel_id, code)).result(timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


async def _execute(server: LabServer, kernel_id: str, code: str) -> None:
    from tornado.websocket import websocket_connect

    url = f"{server.url.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels?token={server.token}"
    msg_id = secrets.token_hex(8)
    request = {
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                   "session": secrets.token_hex(8), "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }  # fmt: skip
    conn = await websocket_connect(url)
    try:
        await conn.write_message(json.dumps(request))
        async with asyncio.timeout(30):
            while True:
                raw = await conn.read_message()
                if raw is None:
                    raise RuntimeError("kernel channel closed before the code started")
                msg = json.loads(raw)
                if (
                    msg.get("parent_header", {}).get("msg_id") == msg_id
                    and msg.get("msg_type") == "status"
                    and msg["content"].get("execution_state") == "busy"
                ):
                    return
    finally:
        conn.close()


def _wait_ready(server: LabServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited early:\n{server.log_path.read_text()[-3000:]}")
        try:
            server.api("GET", "api/gpuburst/placement")
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"jupyter lab not ready in {START_TIMEOUT_S}s:\n{server.log_path.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def start_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LabServer]]:
    """Start `jupyter lab` in a temp root with the given env; every server is stopped at the end."""
    servers: list[LabServer] = []

    def start(env: dict[str, str], name: str) -> LabServer:
        base = tmp_path_factory.mktemp(f"lab-{name}")
        root, settings, user_settings = base / "root", base / "app-settings", base / "user-settings"
        for folder in (root, settings, user_settings, base / "workspaces", base / "runtime"):
            folder.mkdir()
        # The news pop-up would cover the panel in screenshots.
        (settings / "overrides.json").write_text(json.dumps({"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}))
        token, port = secrets.token_hex(16), free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_GPUBURST_")}
        full_env = {
            **clean,
            "JUPYTERLAB_SETTINGS_DIR": str(user_settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            **env,
        }
        log_path = base / "lab.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable, "-m", "jupyterlab",
                    "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
                    f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
                    f"--LabApp.app_settings_dir={settings}",
                    "--ServerApp.port_retries=0",
                ],
                env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=root,
            )  # fmt: skip
        server = LabServer(f"http://127.0.0.1:{port}", token, root, proc, log_path)
        servers.append(server)
        try:
            _wait_ready(server)
        except Exception:
            server.stop()
            raise
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def save_docs_screenshot(source: Path, name: str) -> None:
    """Copy a screenshot to docs/ when it is missing there or GPUBURST_UPDATE_SCREENSHOTS=1."""
    target = DOCS_SCREENSHOTS / name
    if target.exists() and os.environ.get("GPUBURST_UPDATE_SCREENSHOTS") != "1":
        return
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def switch_theme(page: Page, theme: str) -> None:
    """Settings menu → Theme → ``theme``, as a student switches it."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(theme)}$")).click()


def dismiss_news(page: Page) -> None:
    """JupyterLab asks once whether to fetch its news; a student says no."""
    try:
        page.get_by_role("button", name="No", exact=True).click(timeout=3_000)
    except Exception:  # noqa: BLE001 - not asked (yet): nothing covers the launcher
        pass


def log_in_to_lab(page: Page, hub_url: str, user: str, lab_path: str, landing: str) -> None:
    """``user`` logs in at the hub (any password: the test hubs' authenticator), asking for
    ``lab_path`` of their JupyterLab, and lands where the glob ``landing`` says."""
    page.set_default_timeout(60_000)
    page.goto(f"{hub_url}/hub/login?next=/user/{user}/{lab_path}")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill("any password")
    page.locator("#login_submit").click()
    page.wait_for_url(f"**/user/{user}/{landing}")
    dismiss_news(page)


def assert_readable(warning, dark: bool) -> None:
    """The warning's text against its background: WCAG contrast of at least 4.5, and a dark
    background in the dark theme."""
    colors = warning.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    text, back = ([int(x) for x in re.findall(r"\d+", c)[:3]] for c in colors)

    def luminance(rgb: list[int]) -> float:
        channels = [c / 255 for c in rgb]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(text), luminance(back)), reverse=True)
    assert (high + 0.05) / (low + 0.05) >= 4.5, f"text {colors[0]} on {colors[1]}"
    assert (luminance(back) < 0.2) == dark, f"background {colors[1]} in the {'dark' if dark else 'light'} theme"


def stop_my_server(page: Page, hub_url: str, timeout_ms: float = 60_000) -> None:
    """Stop the user's server from JupyterHub's home page, as a student does, and wait until the
    page says it stopped. The page's script binds Stop only once requirejs has loaded it
    (``require(["home"])``, after the page's load event): a click before then does nothing, as a
    loaded machine's fresh clone showed (no stop request reached the hub). The click waits for it."""
    page.goto(f"{hub_url}/hub/home")
    page.wait_for_function(
        "() => { const stop = document.getElementById('stop');"
        " return !!(stop && window.jQuery && (window.jQuery._data(stop, 'events') || {}).click); }",
        timeout=timeout_ms,
    )
    page.click("#stop")
    expect(page.locator("#stop")).to_be_hidden(timeout=timeout_ms)
