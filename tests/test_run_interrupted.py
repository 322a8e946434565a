"""A test run stopped with SIGTERM (a CI timeout, `kill`) tears its fixtures down, so that what they
started (a hub, a demo, a federation's pods) does not outlive it: tests/helpers/sigterm.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent

# a fixture that starts a process and stops it in its teardown, as the hub and demo fixtures do
INTERRUPTED = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path

    import pytest

    @pytest.fixture
    def child(tmp_path):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            yield proc
        finally:
            proc.terminate()
            proc.wait(10)
            Path(sys.argv[-1]).with_name("torn-down").write_text(str(proc.pid))


    def announce(name, pid):
        # written whole, then renamed: the waiting side never reads a half-written file
        path = Path(sys.argv[-1]).with_name(name)
        path.with_suffix(".partial").write_text(str(pid))
        path.with_suffix(".partial").rename(path)

    def test_runs_until_stopped(child):
        announce("running", child.pid)
        time.sleep(600)
    """
)


def test_sigterm_mid_test_runs_fixture_teardown(tmp_path: Path) -> None:
    test_file = tmp_path / "test_interrupted.py"
    test_file.write_text(INTERRUPTED)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "helpers.sigterm", "--rootdir", str(tmp_path), str(test_file)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    running = tmp_path / "running"
    deadline = time.monotonic() + 120
    while not running.exists():
        assert run.poll() is None, f"the run ended before its test ran:\n{run.communicate()[0]}"
        assert time.monotonic() < deadline, "the test never started"
        time.sleep(0.1)
    child = psutil.Process(int(running.read_text()))
    run.send_signal(signal.SIGTERM)
    output, _ = run.communicate(timeout=60)
    try:
        assert (tmp_path / "torn-down").exists(), f"SIGTERM ended the run without the fixture's teardown:\n{output}"
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert run.returncode == 2, f"an interrupted run exits 2, as on Ctrl-C (got {run.returncode}):\n{output}"
    finally:
        if child.is_running():
            child.kill()


# stands in for make in `make test`'s recipes (MAKE=...): setup and lint pass at once, and each
# tier's `make test-<tier>` notes its pid and sleeps as a tier runs, until a signal ends it
TIER_STANDIN = """#!/usr/bin/env bash
case "$*" in
	*test-py*|*test-browser*|*test-kube*) echo $$ >> "$(dirname "$0")/tiers"; exec sleep 600 ;;
esac
exit 0
"""


def test_sigterm_to_make_test_reaches_every_tier(tmp_path: Path) -> None:
    """A CI timeout sends SIGTERM to `make test` (through .ci/run, which execs it). make passes it
    to its own child only: the tiers must get it from there, not run on without their make."""
    standin = tmp_path / "make"
    standin.write_text(TIER_STANDIN)
    standin.chmod(0o755)
    output = tmp_path / "make-test.log"  # a file, not a pipe: a tier left running would hold a pipe open
    with output.open("w") as out:
        run = subprocess.Popen(
            ["make", "--no-print-directory", "test", f"MAKE={standin}", "GO=", "TIER_JOBS=2"],
            cwd=TESTS.parent, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    tiers_file = tmp_path / "tiers"
    tiers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while len(tiers_file.read_text().split() if tiers_file.exists() else []) < 2:
            assert run.poll() is None, f"make test ended before its tiers ran:\n{output.read_text()}"
            assert time.monotonic() < deadline, "the tiers never started"
            time.sleep(0.1)
        tiers = [psutil.Process(int(pid)) for pid in tiers_file.read_text().split()]
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
        _, alive = psutil.wait_procs(tiers, timeout=15)
        assert not alive, f"tiers still running after make test got SIGTERM: {[p.pid for p in alive]}"
    finally:
        # without the fix the tiers' tools/test-lanes runs on too, reparented: it goes with them
        parents = [tier.parent() for tier in tiers if tier.is_running()]
        for process in [*tiers, *(p for p in parents if p is not None and p.pid != os.getpid())]:
            if process.is_running():
                process.kill()
        if run.poll() is None:
            run.kill()
