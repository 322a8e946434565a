"""SIGTERM ends a test run as Ctrl-C does: the running test stops and every fixture's teardown
runs (pytest tears down what is set up when a KeyboardInterrupt ends the session).

A CI job's timeout, `timeout(1)` and `kill` send SIGTERM, whose default action ends Python at
once: no ``finally`` and no fixture teardown ran, so a fixture's hub, proxy, demo or federation
outlived the run (a student-journey demo with its pods was found still running after its pytest
was stopped). Under xdist every worker is a pytest of its own and gets the same handler.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    # only the main thread may set a handler; one set by someone else (a debugger) is theirs
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
