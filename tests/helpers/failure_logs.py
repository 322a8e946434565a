"""On a failing test, the tails of the logs written while it ran (the hub's, the servers', the
emulator's and kubelet's, a control plane's), attached to its report so that CI's output explains
the failure after the run's folders are gone.

Every hub, server, proxy and federation a test starts writes its log under the run's base
temporary folder (each xdist worker has its own); a log counts as the test's when it was written
after the test began, so a shared fixture's log shows only if it moved during this test.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

MAX_LOGS = 8
TAIL_LINES = 40
TAIL_BYTES = 64 * 1024
# a URL's token (a standalone lab's, a browser's document in chromium's log) never into a report
TOKEN_IN_URL = re.compile(r"([?&](?:token|_xsrf)=)[^&#\s\"']+")


def redact(text: str) -> str:
    return TOKEN_IN_URL.sub(r"\1[secret]", text)


def _tail(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - TAIL_BYTES))
        lines = fh.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-TAIL_LINES:])


def logs_written_since(root: Path, since: float) -> list[Path]:
    """``*.log`` files under ``root`` changed at or after ``since``, newest first."""
    found = []
    for path in root.rglob("*.log"):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= since and path.is_file():
            found.append((mtime, path))
    return [p for _, p in sorted(found, reverse=True)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        item.stash[_STARTED] = time.time() - 1  # file times are coarse on some filesystems
    if not report.failed:
        return
    factory = getattr(item.config, "_tmp_path_factory", None)
    if factory is None:
        return
    try:
        root = factory.getbasetemp()
    except OSError:
        return
    since = item.stash.get(_STARTED, time.time() - 60)
    for path in logs_written_since(root, since)[:MAX_LOGS]:
        try:
            text = _tail(path)
        except OSError:
            continue
        report.sections.append((f"log tail: {path.relative_to(root)}", redact(text)))


_STARTED = pytest.StashKey[float]()
