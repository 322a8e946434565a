"""Run a benchmark's coroutine so that SIGTERM and Ctrl-C stop it, and everything it started.

A benchmark starts hubs and proxies in sessions of their own and the federation's pods as
processes; SIGTERM's default action (exit at once) left them all running. Here SIGTERM and
SIGINT cancel the benchmark's main task, so every ``finally`` that stops what was started runs
on a loop still intact. (Raising KeyboardInterrupt from a plain signal handler instead lands in
whatever task is running, the emulated kubelet's included, and the clean-up then waits on it
forever.) Only the first signal cancels: a second one (asyncio.run's own second Ctrl-C raises
KeyboardInterrupt, a supervisor may repeat its SIGTERM) used to cancel the clean-up itself,
midway through stopping a federation of hundreds of pods, and left them running.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; SIGTERM cancels it and raises KeyboardInterrupt once it has unwound."""

    async def stoppable() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = []

        def on_signal(signum: int) -> None:
            if not terminated:
                task.cancel()
            else:
                print(f"{signal.Signals(signum).name}: still stopping what the benchmark started", file=sys.stderr, flush=True)
            terminated.append(signum)

        # asyncio's removal sets SIG_DFL (SIGINT: Python's default), not what was there before:
        # a caller's own handler (a test runner's, a supervisor's) is put back as it was
        previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        for signum in SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            return await main
        except asyncio.CancelledError:
            if terminated:
                raise KeyboardInterrupt from None
            raise
        finally:
            for signum in SIGNALS:
                loop.remove_signal_handler(signum)
                if previous[signum] is not None:
                    signal.signal(signum, previous[signum])

    return asyncio.run(stoppable())


def run_and_print(main: Callable[[Path], Coroutine[Any, Any, dict[str, Any]]], state_dir: Path | None, name: str, one_line: bool) -> int:
    """A benchmark's end: ``main(directory)`` run as ``run`` does, in ``state_dir`` (kept) or a
    temporary directory (removed); its result printed as JSON (one line with ``one_line``); the
    exit status 0 when the result is ``ok``, else 1."""
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
        result = run(main(state_dir))
    else:
        with tempfile.TemporaryDirectory(prefix=f"gpuburst-bench-{name}-") as tmp:
            result = run(main(Path(tmp)))
    json.dump(result, sys.stdout, indent=None if one_line else 2)
    sys.stdout.write("\n")
    return 0 if result["ok"] else 1
