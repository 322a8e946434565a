"""Progress lines for CI: ``GPUBURST_PROGRESS=<tier name>`` makes pytest print, as whole lines,
how far the tier is (every ``GPUBURST_PROGRESS_EVERY_S``, default 30 s) and each failure as it
happens, on file descriptor 3 when it is open (the Makefile points it at the console while the
tier's full output goes to its log), else on the terminal.

Under xdist only the controller reports: it sees every worker's results.
"""

from __future__ import annotations

import os
import time

import pytest

_STATE = pytest.StashKey[dict]()


def _stream():
    try:
        return os.fdopen(os.dup(3), "w", buffering=1)
    except OSError:
        return None


def pytest_configure(config: pytest.Config) -> None:
    tier = os.environ.get("GPUBURST_PROGRESS")
    if not tier or hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    config.stash[_STATE] = {
        "tier": tier,
        "start": time.monotonic(),
        "last": time.monotonic(),
        "every": float(os.environ.get("GPUBURST_PROGRESS_EVERY_S", "30")),
        "total": None,
        "done": 0,
        "failed": 0,
        "out": _stream(),
        "config": config,
    }


def _say(state: dict, text: str) -> None:
    elapsed = time.monotonic() - state["start"]
    line = f"[{state['tier']} {int(elapsed) // 60}m{int(elapsed) % 60:02d}s] {text}"
    if state["out"] is not None:
        state["out"].write(line + "\n")
    else:
        reporter = state["config"].pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state["total"] = len(session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    state = node.config.stash.get(_STATE, None)
    if state is not None:
        state["total"] = len(ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    state = _current_state()
    if state is None:
        return
    if report.failed:
        state["failed"] += 1
        _say(state, f"FAILED {report.nodeid} ({report.when})")
    if report.when == "teardown":
        state["done"] += 1
        now = time.monotonic()
        if now - state["last"] >= state["every"]:
            state["last"] = now
            total = state["total"] or "?"
            _say(state, f"{state['done']}/{total} tests done, {state['failed']} failed; last: {report.nodeid}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        _say(state, f"finished: {state['done']} tests, {state['failed']} failed (exit {int(exitstatus)})")
        if state["out"] is not None:
            state["out"].close()


_CONFIG: list[pytest.Config] = []


def _current_state() -> dict | None:
    return _CONFIG[0].stash.get(_STATE, None) if _CONFIG else None


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[:] = [session.config]
