"""A student's whole journey in chromium, through `gpuburst demo`: JupyterHub, its npm proxy, Lab.

The demo runs as `make demo` runs it (origin with 2 GPUs, donor-1 granting 2). Students click as
students do: the login page, the spawn form, the spawn page, JupyterLab and its GPU panel.

1. student1 starts "2 GPUs": the spawn page's headline says it lands on the origin and why; in Lab
   a notebook cell keeps its kernel busy, and the panel shows live samples (utilization moves),
   memory figures and the kernel with its GPU memory, in the light theme.
2. student2 starts "2 GPUs": the origin is full, so donor-1 (its H100 labels, its own name);
   the panel is checked again in the dark theme, switched from Lab's Settings menu.
3. student3 saw "2 GPUs" free in the form, but student2 took the last ones meanwhile: the refusal
   re-renders the form as a fresh one would, with nothing chosen on the student's behalf.
4. student1 stops the server; student3 starts "2 GPUs" again and lands on the origin.
5. student4 starts "CPU only": the panel says origin, CPU node.

No URL the browser requests carries a token: the panel authenticates as Lab itself does.
Screenshots for docs/screenshots come from these servers behind the hub.

The journey runs twice: with pods in the host's network, as `make demo` runs by default, and
with each pod in a network namespace of its own, as on a cluster (`--pod-network namespaces`,
where this machine allows it: root), where the hub listens where pods can reach it and nothing
reaches a pod's loopback.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import save_docs_screenshot, stop_my_server, switch_theme
from helpers.demo_process import DemoSite, demo_site
from playwright.sync_api import Browser, BrowserContext, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from jupyter_gpuburst.demo import DEFAULT_PASSWORD
from jupyter_gpuburst.sim.kubelet import netns

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(420)]

PANEL = "#jupyter-gpuburst-panel"
STATUS = "button.jp-GpuBurst-status"
SPAWN_TO_LAB_LIMIT_S = 15.0  # on a quiet machine; the figure measured is printed, not asserted


@pytest.fixture(scope="module", params=["shared", "namespaces"])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    if request.param == "namespaces" and netns.unavailable():
        pytest.skip(f"no pod network namespaces here: {netns.unavailable()}")
    state = tmp_path_factory.mktemp(f"journey-demo-{request.param}")
    with demo_site(state, "--origin-gpus", "2", "--donor-gpus", "2", "--pod-network", request.param) as site:
        yield site


class Student:
    """One student: a browser context of their own (cookies), with the requests it made."""

    def __init__(self, browser: Browser, demo: DemoSite, name: str) -> None:
        self.name = name
        self.demo = demo
        self.context: BrowserContext = browser.new_context(viewport={"width": 1280, "height": 860})
        self.page: Page = self.context.new_page()
        self.urls: list[str] = []
        self.page.on("request", lambda request: self.urls.append(request.url))
        self.spawn_to_lab_s: float | None = None

    def login(self) -> None:
        page = self.page
        page.goto(f"{self.demo.url}/hub/login")
        page.fill("#username_input", self.name)
        page.fill("#password_input", DEFAULT_PASSWORD)
        page.click("#login_submit")
        expect(page.locator("#spawn_form")).to_be_visible(timeout=30_000)

    def choose(self, slug: str) -> None:
        self.page.check(f"#profile-item-{slug}")

    def start(self) -> None:
        self.page.click("#spawn_form [type=submit]")

    def wait_for_lab(self, started: float) -> None:
        expect(self.page.locator(STATUS)).to_be_visible(timeout=90_000)
        self.spawn_to_lab_s = time.monotonic() - started

    def dismiss_news(self) -> None:
        """JupyterLab asks once whether to fetch its news; a student says no."""
        no = self.page.get_by_role("button", name="No", exact=True)
        try:
            no.click(timeout=3_000)
        except PlaywrightTimeout:
            pass  # not asked (yet): nothing covers the panel

    def open_panel(self) -> None:
        page = self.page
        self.dismiss_news()
        if not page.locator(PANEL).is_visible():
            page.locator(STATUS).click()
        expect(page.locator(PANEL)).to_be_visible()

    def busy_notebook(self) -> None:
        """A new notebook from the launcher, with a cell that keeps its kernel busy."""
        page = self.page
        page.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
        cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first
        expect(cell).to_be_visible(timeout=30_000)
        expect(page.locator(".jp-StatusBar-Widget", has_text="| Idle").first).to_be_visible(timeout=60_000)
        cell.click()
        page.keyboard.type("import time\nwhile True: time.sleep(0.5)")
        page.keyboard.press("Shift+Enter")
        prompt = page.locator(".jp-Notebook .jp-InputPrompt").first
        expect(prompt).to_have_text(re.compile(r"\[\*\]"), timeout=20_000)

    def close(self) -> None:
        self.context.close()


def spawn(student: Student, slug: str) -> tuple[Page, float]:
    student.choose(slug)
    started = time.monotonic()
    student.start()
    return student.page, started


def assert_headline(page: Page, pattern: str) -> None:
    headline = page.locator("#gpuburst-headline")
    expect(headline).to_be_visible(timeout=30_000)
    expect(headline).to_contain_text(re.compile(pattern))


def assert_live_panel(student: Student, site: str, gpu_model: str) -> None:
    page = student.page
    panel = page.locator(PANEL)
    where = panel.locator(".jp-GpuBurst-where")
    expect(where.locator("dd[data-field=site]")).to_have_text(site, timeout=30_000)
    expect(where.locator("dd[data-field=gpu]")).to_have_text(f"2 × {gpu_model}", timeout=30_000)
    expect(panel.locator(".jp-GpuBurst-gpu")).to_have_count(2)
    expect(panel.locator(".jp-GpuBurst-connection")).to_have_count(0)
    # the busy kernel's GPU: utilization above zero, and it moves from one read to the next
    values = panel.locator(".jp-GpuBurst-chart-utilization .jp-GpuBurst-chartValue")
    busy = values.filter(has_text=re.compile(r"^[1-9]\d* %$"))
    expect(busy).not_to_have_count(0, timeout=45_000)
    line = panel.locator(".jp-GpuBurst-chart-utilization path.jp-GpuBurst-line").first
    first = line.get_attribute("d")
    deadline = time.monotonic() + 10
    while line.get_attribute("d") == first and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert line.get_attribute("d") != first, "no new sample in 10 s: the panel is not live"
    memory = panel.locator(".jp-GpuBurst-chart-memory .jp-GpuBurst-chartValue").first
    expect(memory).to_have_text(re.compile(r"^\d+(\.\d)? (B|KiB|MiB|GiB) / \d+(\.\d)? GiB$"))
    # the running kernel with the GPU memory it holds
    row = panel.locator(".jp-GpuBurst-kernels tbody tr").first
    expect(row).to_be_visible(timeout=30_000)
    expect(row.locator("td").first).to_have_text(re.compile(r"\.ipynb$"))
    expect(row.locator("td").nth(2)).to_have_text(re.compile(r"^\d+(\.\d)? (MiB|GiB)$"), timeout=15_000)


def shoot(student: Student, name: str, artifacts: Path) -> None:
    page = student.page
    student.dismiss_news()
    shot = artifacts / name
    page.locator(PANEL).screenshot(path=str(shot))
    save_docs_screenshot(shot, name)


def test_student_journey(browser: Browser, demo: DemoSite, artifacts: Path) -> None:
    students: list[Student] = []

    def student(name: str) -> Student:
        s = Student(browser, demo, name)
        students.append(s)
        s.login()
        return s

    try:
        # 1. origin
        s1 = student("student1")
        page, started = spawn(s1, "gpu-2")
        assert_headline(page, r"starting on the origin \(node origin-gpu\)")
        expect(page.locator("#progress-log")).not_to_contain_text("Started container")
        s1.wait_for_lab(started)
        s1.open_panel()
        expect(page.locator(STATUS)).to_contain_text("origin")
        # the launcher's GPU kernels are GPUs besides the two this server's notebooks use
        gpu_kernels = page.locator(".jp-Launcher-sectionTitle", has_text="GPU kernels, besides this server's 2 GPUs")
        expect(gpu_kernels).to_be_visible(timeout=30_000)
        expect(page.locator(".jp-Launcher-sectionTitle", has_text=re.compile(r"^GPU kernels$"))).to_have_count(0)
        s1.busy_notebook()
        assert_live_panel(s1, "origin", "NVIDIA A100-SXM4-40GB")
        shoot(s1, "journey-origin-light.png", artifacts)

        # 3 (first half). student3 sees "2 GPUs" free now, before student2 takes the last ones
        s3 = student("student3")
        expect(s3.page.locator("#profile-item-gpu-2")).to_be_enabled()

        # 2. donor, and the dark theme
        s2 = student("student2")
        page, started = spawn(s2, "gpu-2")
        assert_headline(page, r"All 2 GPUs on the origin are busy; starting on donor-1")
        page.screenshot(path=str(artifacts / "journey-spawn-donor.png"))
        save_docs_screenshot(artifacts / "journey-spawn-donor.png", "journey-spawn-donor.png")
        expect(page.locator("#gpuburst-headline")).not_to_contain_text("donor donor-1")
        s2.wait_for_lab(started)
        s2.open_panel()
        s2.busy_notebook()
        assert_live_panel(s2, "donor-1", "NVIDIA H100 80GB HBM3")
        expect(page.locator(f"{PANEL} .jp-GpuBurst-site")).to_have_text("Running on donor-1, a donor cluster.")
        switch_theme(page, "JupyterLab Dark")
        expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=20_000)
        panel = page.locator(PANEL)
        background = panel.evaluate("el => getComputedStyle(el).backgroundColor")
        assert sum(int(v) for v in re.findall(r"\d+", background)[:3]) < 3 * 96, f"{background} is not dark"
        assert_live_panel(s2, "donor-1", "NVIDIA H100 80GB HBM3")
        # the demo's servers have no home volume: the panel says what that means for saved files
        lost = page.locator(f"{PANEL} .jp-GpuBurst-storage-lost")
        expect(lost).to_contain_text("files are lost when it stops")
        expect(lost).to_have_attribute("data-kind", "none")
        shoot(s2, "journey-donor-dark.png", artifacts)

        # 3. nothing fits any more: refused, and the form comes back as a fresh one would
        s3.choose("gpu-2")
        s3.start()
        form = s3.page.locator("#spawn_form")
        expect(form).to_be_visible(timeout=30_000)
        expect(s3.page.locator(".spawn-error-msg")).to_contain_text("No site can start 2 GPUs now")
        expect(s3.page.locator("#profile-item-gpu-2")).to_be_disabled()
        expect(s3.page.locator("#profile-item-cpu")).to_be_enabled()
        expect(s3.page.locator("#profile-item-mig-1g")).to_be_enabled()
        expect(form).not_to_contain_text("Misconfigured")
        expect(form.locator("input[name=profile]:checked")).to_have_count(0)
        expect(form.locator("[type=submit]")).to_be_disabled()
        full = form.locator("label.gpuburst-full").filter(has=s3.page.locator("#profile-item-gpu-2"))
        expect(full).to_have_attribute("title", re.compile(r"^Full now: "))
        s3.page.screenshot(path=str(artifacts / "journey-refused-form.png"))
        save_docs_screenshot(artifacts / "journey-refused-form.png", "journey-refused-form.png")

        # 4. student1 stops; student3 tries again and lands on the origin
        stop_my_server(s1.page, demo.url)
        s3.page.goto(f"{demo.url}/hub/spawn")
        expect(s3.page.locator("#profile-item-gpu-2")).to_be_enabled(timeout=30_000)
        page, started = spawn(s3, "gpu-2")
        assert_headline(page, r"starting on the origin")
        s3.wait_for_lab(started)

        # 5. CPU only: the origin, on a CPU node
        s4 = student("student4")
        page, started = spawn(s4, "cpu")
        assert_headline(page, r"No GPU requested")
        s4.wait_for_lab(started)
        expect(page.locator(STATUS)).to_have_text("origin · no GPU", timeout=30_000)
        s4.open_panel()
        expect(page.locator(f"{PANEL} .jp-GpuBurst-site")).to_contain_text("origin, on a CPU node")
        expect(page.locator(f"{PANEL} dd[data-field=site]")).to_have_text("origin")
        expect(page.locator(f"{PANEL} dd[data-field=node]")).to_have_text(re.compile(r"^origin-"))
        expect(page.locator(f"{PANEL} .jp-GpuBurst-where")).not_to_contain_text("standalone")

        for s in students:
            leaked = [u for u in s.urls if "token=" in u]
            assert not leaked, f"{s.name}'s browser sent a token in a URL: {leaked[:3]}"
        timings = {s.name: round(s.spawn_to_lab_s, 1) for s in students if s.spawn_to_lab_s is not None}
        print(f"spawn-to-Lab seconds (limit {SPAWN_TO_LAB_LIMIT_S} s on a quiet machine): {timings}")
    except Exception:
        for s in students:  # what each student saw, for the failure's report
            s.page.screenshot(path=str(artifacts / f"journey-failed-{s.name}.png"))
        raise
    finally:
        for s in students:
            s.close()
