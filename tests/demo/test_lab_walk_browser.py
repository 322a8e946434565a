"""A lab walked through in chromium against `gpuburst demo`, as its people act (light and dark):

1. the teacher logs in, opens the labs page and books ML-101 quiz for the class ml-101 (student1,
   student2) starting in under two minutes, for one minute; the page says its cost and the GPUs
   then before anything is saved;
2. student3, outside the class, opens the spawn form: the GPU profile is full because the lab
   holds the GPUs, and pressing Start waits in line;
3. once the lab has started, student1 and student2 start the same profile and get its GPUs at
   once, ahead of student3, who still waits;
4. after the lab's end the teacher reads "How it went": both students started, nobody waited,
   how long from Start to a server that answers (not only its pod running; no student ran a
   cell, and the report says which figure it shows), and the GPU-hours used against those
   booked; student1 stops, and student3's wait ends.

The demo runs with the origin's two GPUs only (no donor), so that the lab's GPUs are every GPU
there is, and with an admin's --config that lets a full server start wait in line
(queue_when_full) rather than be refused. GPUBURST_SCREENSHOTS=docs/screenshots saves the key
screens there for docs/teachers.md.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from helpers.browser import stop_my_server
from helpers.demo_process import DemoSite, demo_site
from playwright.sync_api import Browser, Page, expect

from jupyter_gpuburst.demo import DEFAULT_PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(420)]

LABS = "/services/gpuburst/labs"
TITLE = "ML-101 quiz"
OUTSIDER = "student3"
IN_LINE = re.compile(r"^You are next in line for a GPU")
# what the admin's own file adds to the demo: a full GPU profile's start waits in line, long
# enough for a one-minute lab to pass
ADMIN_CONFIG = "c.GPUBurstSpawner.queue_when_full = True\nc.KubeSpawner.start_timeout = 300\n"
# a lab booked now starts at the first whole minute at least this far off: room for the
# teacher's check and save on a loaded machine (a start in the past is refused)
LEAD_S = 40
# the longest a Start's form post may take before the hub's spawner starts (on a loaded machine)
POST_S = 1.0
VIEWPORT = {"width": 1280, "height": 860}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSite]:
    state = tmp_path_factory.mktemp("lab-walk")
    mine = state / "admin_config.py"
    mine.write_text(ADMIN_CONFIG)
    with demo_site(state, "--origin-gpus", "2", "--donors", "0", "--config", str(mine)) as site:
        yield site


def person(browser: Browser, demo: DemoSite, name: str, password: str, next_path: str = "") -> Page:
    """``name`` logged in at the demo's hub, in a browser context of their own."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{demo.url}/hub/login" + (f"?next={next_path}" if next_path else ""))
    page.locator("#username_input").fill(name)
    page.locator("#password_input").fill(password)
    page.locator("#login_submit").click()
    return page


def lightness(css_color: str) -> float:
    return sum(int(v) for v in re.findall(r"\d+", css_color)[:3]) / (3 * 255)


def in_both_themes(page: Page, name: str) -> None:
    """The screen as it is, in JupyterHub's light and then dark theme (the page's own toggle
    sets the same attribute and storage), each readable; saved as ``name``-light.png and
    ``name``-dark.png where GPUBURST_SCREENSHOTS names a folder."""
    folder = os.environ.get("GPUBURST_SCREENSHOTS")
    for theme in ("light", "dark"):
        page.evaluate(
            "theme => { localStorage.setItem('jupyterhub-bs-theme', theme);"
            " document.documentElement.setAttribute('data-bs-theme', theme); }",
            theme,
        )
        expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
        back = page.locator("body").evaluate("e => getComputedStyle(e).backgroundColor")
        assert (lightness(back) < 0.5) == (theme == "dark"), f"{name}: background {back} in the {theme} theme"
        if folder:
            # the buttons' colour transitions, else caught half-way in the picture
            page.wait_for_function("() => document.getAnimations().every(a => a.playState !== 'running')")
            path = Path(folder) / f"{name}-{theme}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path))
    page.evaluate("() => { localStorage.setItem('jupyterhub-bs-theme', 'light');"
                  " document.documentElement.setAttribute('data-bs-theme', 'light'); }")  # fmt: skip


def next_slot(now: dt.datetime) -> dt.datetime:
    """The first whole minute at least LEAD_S after ``now`` whose minute after it is the same
    day (the page's End is a time of the start's day)."""
    start = (now + dt.timedelta(seconds=LEAD_S)).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    while (start + dt.timedelta(minutes=1)).date() != start.date():
        start += dt.timedelta(minutes=1)
    return start


def wait_until(moment: dt.datetime) -> None:
    left = (moment - dt.datetime.now(moment.tzinfo)).total_seconds()
    if left > 0:
        time.sleep(left + 1)


def server_started(page: Page, user: str) -> float:
    """When the student's server began, by its own clock (jupyter_server's api/status)."""
    started = page.evaluate(
        """async (user) => {
            const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || "";
            const r = await fetch(`/user/${user}/api/status`, { headers: { "X-XSRFToken": decodeURIComponent(xsrf) } });
            return (await r.json()).started;
        }""",
        user,
    )
    return dt.datetime.fromisoformat(started).timestamp()


def report(page: Page, booking_id: str) -> dict:
    """The lab's report as the page's own script asks for it (the login cookie and XSRF token)."""
    return page.evaluate(
        """async (id) => {
            const root = document.getElementById("gpuburst-labs");
            const r = await fetch(`${root.dataset.api}/${id}/report`,
                { credentials: "same-origin", headers: { "X-XSRFToken": root.dataset.xsrf } });
            return { status: r.status, data: await r.json() };
        }""",
        booking_id,
    )


def test_a_teacher_books_a_lab_its_class_goes_first_and_the_teacher_reads_how_it_went(browser: Browser, demo: DemoSite) -> None:
    began = time.monotonic()
    # 1. the teacher books the lab
    teacher = person(browser, demo, "teacher", demo.admin_password, LABS)
    expect(teacher.locator("#gpuburst-labs")).to_be_visible(timeout=30_000)
    rules = teacher.locator("#labs-rules").inner_text()
    tz = ZoneInfo(re.search(r"Times are in (\S+?)\.", rules)[1])
    start = next_slot(dt.datetime.now(tz))
    end = start + dt.timedelta(minutes=1)
    teacher.locator("#lab-title").fill(TITLE)
    teacher.locator("#lab-group").select_option("ml-101")
    teacher.locator("#lab-profile").select_option("gpu-1")
    teacher.locator("#lab-students").fill("2")
    teacher.locator("#lab-start").fill(start.strftime("%Y-%m-%dT%H:%M"))
    teacher.locator("#lab-end").fill(end.strftime("%H:%M"))
    teacher.locator("#lab-preview").click()
    result = teacher.locator("#lab-result")
    # 2 students x 1 GPU x (1 min + 15 min warm-up); the origin's 2 GPUs, the demo's own lab an hour on
    expect(result).to_have_text(
        "2 GPUs, 0.53 GPU-hours (0.5 of them warming up). The sites have 2 GPUs, other labs hold 0 then, 2 left. It can be booked."
    )
    in_both_themes(teacher, "labs-book")
    teacher.locator("#lab-save").click()
    row = teacher.locator("#labs-table tbody tr", has_text=TITLE)
    expect(row).to_have_count(1)
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("ml-101")
    expect(cells.nth(3)).to_have_text(re.compile(rf"{start:%H:%M}-{end:%H:%M}"))
    expect(cells.nth(4)).to_have_text("2 x gpu-1")
    expect(cells.nth(5)).to_have_text("0.53")
    expect(cells.nth(6)).to_have_text("approved")
    booking_id = row.get_attribute("data-id")

    # 2. outside the class, student3 finds the GPUs held for the lab and waits in line
    outsider = person(browser, demo, OUTSIDER, DEFAULT_PASSWORD)
    expect(outsider.locator("#spawn_form")).to_be_visible(timeout=30_000)
    held = f"2 GPUs are held for the lab {TITLE} until {end:%H:%M}."
    note = outsider.locator(".gpuburst-availability[data-profile='gpu-1']")
    expect(note).to_have_attribute("data-full", "true")
    expect(note).to_have_attribute("data-queues", "true")
    expect(outsider.locator("#spawn_form")).to_contain_text(f"Full now: {held} Start waits in line for a GPU.")
    outsider.check("#profile-item-gpu-1")
    in_both_themes(outsider, "labs-outsider-form")
    outsider.click("#spawn_form [type=submit]")
    headline = outsider.locator("#gpuburst-headline")
    expect(headline).to_have_text(IN_LINE, timeout=30_000)

    # 3. the lab starts: its class gets the GPUs at once, ahead of student3
    wait_until(start)
    students = {name: person(browser, demo, name, DEFAULT_PASSWORD) for name in ("student1", "student2")}
    clicked: dict[str, float] = {}
    landed: dict[str, float] = {}
    up: dict[str, float] = {}
    for name, page in students.items():
        expect(page.locator("#spawn_form")).to_be_visible(timeout=30_000)
        note = page.locator(".gpuburst-availability[data-profile='gpu-1']")
        expect(note).to_have_attribute("data-full", "false")
        expect(note).not_to_contain_text("held for the lab")
        expect(note).to_contain_text("Would start on the origin.")
        if name == "student1":
            page.check("#profile-item-gpu-1")
            in_both_themes(page, "labs-student-form")
        page.check("#profile-item-gpu-1")
        clicked[name] = time.time()
        page.click("#spawn_form [type=submit]")
    for name, page in students.items():
        page.wait_for_url(f"**/user/{name}/lab**", timeout=120_000)
        landed[name] = time.time()
        up[name] = server_started(page, name)
    # student3 pressed Start first and still waits: the class went ahead
    expect(headline).to_have_text(IN_LINE)
    assert f"/hub/spawn-pending/{OUTSIDER}" in outsider.url, outsider.url
    in_both_themes(outsider, "labs-outsider-waits")

    # 4. after the lab, the teacher reads how it went
    wait_until(end)
    teacher.reload()
    row = teacher.locator("#labs-table tbody tr", has_text=TITLE)
    row.get_by_role("button", name="How it went").click()
    expect(result).to_have_text(
        re.compile(
            r"^2 of 2 expected students started\. From Start to a ready server \(no student's first GPU cell was heard of\):"
            r" [0-9.]+ s for half of them, [0-9.]+ s for 95%\."
            r" GPU-hours: [0-9.]+ used of 0\.53 booked(, [0-9.]+ held idle)?\.$"
        )
    )
    in_both_themes(teacher, "labs-report")
    answer = report(teacher, booking_id)
    assert answer["status"] == 200, answer
    lab = answer["data"]
    assert lab["over"] is True, lab
    assert lab["started"] == ["student1", "student2"], lab
    assert lab["still_waiting"] == [] and lab["never_started"] == [], lab
    ready = lab["seconds_to_ready"]
    assert ready["measured"] == 2 and lab["measures"] == "server_ready", lab
    # from Start to a server that answers: after the server in the pod began (its own clock of
    # when it started, less the form's post before the hub's start), before the student's
    # browser was sent to it
    print({n: (round(up[n] - clicked[n], 2), round(landed[n] - clicked[n], 2)) for n in clicked}, ready)
    assert ready["p50"] >= min(up[n] - clicked[n] for n in clicked) - POST_S, (lab, clicked, up)
    assert ready["p95"] <= max(landed[n] - clicked[n] for n in clicked), (lab, clicked, landed)
    assert 0 < lab["gpu_hours"]["used"] <= lab["gpu_hours"]["booked"] == 0.53, lab

    # student1 leaves; student3's wait ends on the GPU it gave back
    stop_my_server(students["student1"], demo.url)
    outsider.wait_for_url(f"**/user/{OUTSIDER}/lab**", timeout=120_000)
    print(f"\nthe lab walk took {time.monotonic() - began:.0f} s")
