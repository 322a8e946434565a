"""SIGTERM stops a benchmark as Ctrl-C does: its clean-up runs, on a loop still working."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpuburst.bench import stopping


def test_sigterm_unwinds_the_benchmark_and_its_clean_up_can_still_await():
    before = signal.getsignal(signal.SIGTERM)
    started: list[subprocess.Popen] = []
    cleaned: list[int | None] = []

    async def benchmark():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(child)
        try:
            asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            child.terminate()
            await asyncio.sleep(0.05)  # the loop still runs tasks during the clean-up
            cleaned.append(await asyncio.to_thread(child.wait, 10))

    with pytest.raises(KeyboardInterrupt):
        stopping.run(benchmark())
    assert cleaned and cleaned[0] is not None
    assert started[0].poll() is not None
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is gone afterwards


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_during_the_clean_up_does_not_cut_it_short(signum, capsys):
    cleaned: list[str] = []

    async def benchmark():
        loop = asyncio.get_running_loop()
        try:
            loop.call_later(0.2, os.kill, os.getpid(), signum)
            await asyncio.sleep(30)
        finally:
            # stopping a large federation takes a while: a supervisor repeats its signal meanwhile
            again = loop.create_future()
            loop.call_soon(os.kill, os.getpid(), signum)
            loop.call_later(0.3, again.set_result, None)
            await again
            cleaned.append("stopped")

    # what the run found: Python's own for SIGINT, unless the run was started in the background
    # of a shell without job control (a CI runner's, a script's `&`), which ignores SIGINT
    found = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(KeyboardInterrupt):
        stopping.run(benchmark())
    assert cleaned == ["stopped"]
    assert "still stopping" in capsys.readouterr().err
    assert {signum: signal.getsignal(signum) for signum in found} == found


def test_a_benchmark_that_ends_returns_its_result_and_leaves_sigterm_alone():
    before = signal.getsignal(signal.SIGTERM)

    async def benchmark():
        await asyncio.sleep(0)
        return {"ok": True}

    assert stopping.run(benchmark()) == {"ok": True}
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_cancellation_not_caused_by_sigterm_stays_a_cancellation():
    async def benchmark():
        asyncio.current_task().cancel()
        await asyncio.sleep(1)

    with pytest.raises(asyncio.CancelledError):
        stopping.run(benchmark())


def test_run_and_print_runs_in_a_kept_or_a_removed_directory_and_exits_by_ok(tmp_path, capsys):
    seen: list[Path] = []

    async def bench(state_dir: Path) -> dict:
        (state_dir / "hub.log").write_text("x")
        seen.append(state_dir)
        return {"ok": len(seen) == 1}

    kept = tmp_path / "state" / "here"
    assert stopping.run_and_print(bench, kept, "demo", one_line=True) == 0
    assert (kept / "hub.log").exists() and capsys.readouterr().out == '{"ok": true}\n'
    assert stopping.run_and_print(bench, None, "demo", one_line=False) == 1
    assert seen[1].name.startswith("gpuburst-bench-demo-") and not seen[1].exists()
    assert capsys.readouterr().out == '{\n  "ok": false\n}\n'
