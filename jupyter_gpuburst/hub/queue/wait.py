"""Waiting in the one first-come-first-served line for a GPU, telling the student where they stand;
the students of a lab on now come first among them (``hub.queue.classes``).

Servers (the spawner) and GPU kernels (the kernel API) wait in the same line of the hub's
``CapacityTracker``: only its head is placed, so nobody is overtaken by a later request that
happens to be retried first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement
from jupyter_gpuburst.hub import metrics
from jupyter_gpuburst.hub.queue import classes
from jupyter_gpuburst.hub.queue.ends import known_ends
from jupyter_gpuburst.hub.queue.estimate import Estimate, line_message

if TYPE_CHECKING:
    from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker

# how often the place and the estimate are looked at again when nothing else changes
RECHECK_S = 1.0


async def wait_in_line(
    tracker: CapacityTracker,
    key: str,
    request: GPURequest,
    place: Callable[[], Placement | NoCapacity],
    tell: Callable[[str, int, Estimate], None],
    timeout_s: float,
) -> Placement | NoCapacity:
    """Wait until ``place()`` finds room for ``request`` while at the head of the line, at most
    ``timeout_s``; ``tell(message, position, estimate)`` whenever what the student reads changes.

    Whatever ends the wait (placed, timed out, cancelled) takes ``key`` out of the line.
    """
    tracker.enqueue(key, request.resource, request.count, first=classes.goes_first(request))
    metrics.set_queue_length(tracker.queue_length)
    deadline = time.monotonic() + timeout_s
    outcome: Placement | NoCapacity = NoCapacity("queue wait ended")
    said = ""
    placed = False
    try:
        while time.monotonic() < deadline:
            position = tracker.queue_position(key)
            if position == 1:
                outcome = place()
                if isinstance(outcome, Placement):
                    placed = True
                    return outcome
            wait = tracker.queue_estimate(key, await known_ends(request.resource))
            what = "a GPU" if request.count <= 1 else f"{request.count} GPUs"
            text = line_message(position, wait, what)
            if text != said:
                tell(text, position, wait)
                said = text
            await tracker.wait_change(min(RECHECK_S, max(0.01, deadline - time.monotonic())))
        reason = outcome.reason if isinstance(outcome, NoCapacity) else ""
        return NoCapacity(f"Waited {timeout_s:g} s in the queue without a free GPU. {reason}".strip())
    finally:
        tracker.dequeue(key, placed=placed)
        metrics.set_queue_length(tracker.queue_length)
