"""A pod watcher cancelled as its pod changes must end: a lost cancellation hung a spawn.

Found by the spawn benchmark: about one spawn in a few hundred waited ``start_timeout`` for a
server that was up, because the watcher's wait swallowed the cancellation (Python 3.11's
``asyncio.wait_for`` does when the awaited event fires in the same loop iteration).
"""

from __future__ import annotations

import asyncio

from jupyter_gpuburst.hub.capacity.tracker import _wait_event


async def test_cancel_as_the_event_fires_is_not_lost():
    for _ in range(20):
        event = asyncio.Event()

        async def watcher(event: asyncio.Event = event) -> None:
            while True:  # like the spawner's pod watcher: loops until cancelled
                await _wait_event(event, 0.5)
                event.clear()

        task = asyncio.ensure_future(watcher())
        await asyncio.sleep(0)
        event.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2.0)
        assert task in done and task.cancelled()


async def test_wait_ends_at_the_timeout_or_the_event():
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _wait_event(event, 0.05)
    assert 0.04 <= loop.time() - started < 3.0
    loop.call_later(0.01, event.set)
    started = loop.time()
    await _wait_event(event, 5.0)
    assert loop.time() - started < 3.0  # the event, not the 5 s timeout
