"""`gpuburst demo` as a process of its own, for the tests that walk it in a browser."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jupyter_gpuburst.demo import free_port

READY = re.compile(r"login page up in ([0-9.]+)s")
READY_S = 120.0
ADMIN_PASSWORD = re.compile(r"admin:\s+teacher;\s+password: (\S+)")


@dataclass
class DemoSite:
    url: str
    admin_password: str
    output: str  # what it printed up to its login page
    proc: subprocess.Popen
    state: Path


@contextmanager
def running_demo(state: Path, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """``gpuburst demo --state-dir state *args`` until the block ends (Ctrl-C, as its user would
    stop it; killed if it has not stopped within a minute); yields the process and its output up
    to its login page."""
    out = (state / "demo.out").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "demo", "--state-dir", str(state), *args],
        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + READY_S
        text = ""
        while time.monotonic() < deadline:
            text = (state / "demo.out").read_text()
            if READY.search(text):
                break
            if proc.poll() is not None:
                raise AssertionError(f"demo exited:\n{text}")
            time.sleep(0.3)
        else:
            proc.kill()
            raise AssertionError(f"demo not ready:\n{text}")
        yield proc, text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


@contextmanager
def demo_site(state: Path, *args: str) -> Iterator[DemoSite]:
    """``running_demo`` on a free port: its URL, the admin's password it printed, and the rest."""
    port = free_port()
    with running_demo(state, "--port", str(port), *args) as (proc, text):
        yield DemoSite(f"http://127.0.0.1:{port}", ADMIN_PASSWORD.search(text)[1], text, proc, state)
