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
import signal
from collections.abc import Coroutine
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
