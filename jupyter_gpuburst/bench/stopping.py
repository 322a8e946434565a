"""Run a benchmark's coroutine so that SIGTERM stops it the way Ctrl-C does.

A benchmark starts hubs and proxies in sessions of their own and the federation's pods as
processes; SIGTERM's default action (exit at once) left them all running. Here SIGTERM cancels
the benchmark's main task, as asyncio.run does on a first Ctrl-C, so every ``finally`` that
stops what was started runs on a loop still intact. (Raising KeyboardInterrupt from a plain
signal handler instead lands in whatever task is running, the emulated kubelet's included,
and the clean-up then waits on it forever.)
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


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; SIGTERM cancels it and raises KeyboardInterrupt once it has unwound."""

    async def stoppable() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = []

        def on_sigterm() -> None:
            terminated.append(True)
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        except asyncio.CancelledError:
            if terminated:
                raise KeyboardInterrupt from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

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
