"""A federation and a real hub for browser tests, on an event loop in a thread of their own.

Playwright's sync API owns the main thread's loop, so the federation and the hub run on a loop
in a daemon thread; a test waits for a coroutine there with ``LoopThread.run``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from helpers.hub import Hub
from jupyter_gpuburst.sim.testing import running_federation

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running in a daemon thread; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="federation-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def federation_and_hub(
    base: Path, hub_config: str, prepare: Callable[[Any], Awaitable[None]] | None = None
) -> Iterator[tuple[LoopThread, Any, Hub]]:
    """The default federation under ``base`` and a hub with ``hub_config`` in front of it, up;
    ``prepare(federation)`` runs before the hub starts. Both are stopped on the way out (which
    also ends every pod process), then the loop."""
    (base / "hub").mkdir()
    loop = LoopThread()
    federation = running_federation(state_dir=base / "sim", kubeconfig=base / "kubeconfig")
    fed: Any = None
    hub: Hub | None = None
    try:
        fed = loop.run(federation.__aenter__())
        if prepare is not None:
            loop.run(prepare(fed))
        hub = Hub(base / "hub", base / "kubeconfig", hub_config)
        hub.start()
        loop.run(hub.wait_up(timeout=90))
        yield loop, fed, hub
    finally:
        try:
            if hub is not None:
                loop.run(hub.stop(), timeout=60)
            if fed is not None:
                loop.run(federation.__aexit__(None, None, None), timeout=60)
        finally:
            loop.close()
