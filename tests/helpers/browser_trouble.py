"""On a failing browser test, what the page itself met: requests that failed or were answered
with an error, console errors and warnings, and uncaught page errors, each with its time since
the test began. A failure such as JupyterLab's "Error Loading Theme" dialog (a stylesheet whose
load failed) leaves no trace in any server's log; the browser's side of it comes from here."""

from __future__ import annotations

import time

import pytest

from helpers.failure_logs import redact

MAX_LINES = 120
_SEEN = pytest.StashKey[list[str]]()


@pytest.fixture(autouse=True)
def _browser_trouble(request: pytest.FixtureRequest):
    if "page" not in request.fixturenames:
        yield
        return
    page = request.getfixturevalue("page")
    seen = request.node.stash.setdefault(_SEEN, [])
    began = time.monotonic()

    def note(line: str) -> None:
        seen.append(f"{time.monotonic() - began:8.2f}s  {redact(line)}")

    page.on("requestfailed", lambda r: note(f"request failed: {r.method} {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and note(f"answered {r.status}: {r.request.method} {r.url}"))
    page.on("console", lambda m: m.type in ("error", "warning") and note(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: note(f"page error: {e}"))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    seen = item.stash.get(_SEEN, None)
    if report.failed and seen:
        report.sections.append(("browser: failed requests, errors and warnings", "\n".join(seen[-MAX_LINES:])))
