"""When the running GPU sessions will end, as far as this hub knows, for the queue's estimate.

Whatever knows an end provides it here: the GPU culler (``hub.culling.live``) knows when it will
take back a server's or a kernel's GPUs (idle past its limit, or at its maximum age). Sessions
with no known end (culling off, never reported, exempt) are left out, so the estimate falls back
to recent waits or says "unknown".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# resource -> (seconds until it ends, GPUs of that resource it holds) per session with a known end
EndsSource = Callable[[str], Awaitable[list[tuple[float, int]]]]
_source: EndsSource | None = None
# every waiting request looks again at each change of the cluster: at a lab's start hundreds
# wait, and the culler walks every server and kernel per look, so one look serves them all
# for a second (an estimate in minutes does not move in a second)
FRESH_S = 1.0
_looked: dict[str, tuple[float, list[tuple[float, int]]]] = {}


def provide(source: EndsSource | None) -> None:
    """Make ``source`` the one that tells sessions' ends (None: none is known)."""
    global _source
    _source = source
    _looked.clear()


async def known_ends(resource: str | None) -> list[tuple[float, int]]:
    """(seconds until it ends, GPUs of ``resource`` it holds) for each session with a known end."""
    if _source is None or resource is None:
        return []
    now = time.monotonic()
    looked = _looked.get(resource)
    if looked is not None and now - looked[0] < FRESH_S:
        # seconds until each end, counted from now rather than from the look
        return [(seconds - (now - looked[0]), gpus) for seconds, gpus in looked[1]]
    try:
        ends = await _source(resource)
    except Exception:  # noqa: BLE001 - an estimate must never break the wait it describes
        log.warning("No session ends for the queue's estimate", exc_info=True)
        ends = []
    _looked[resource] = (now, ends)
    return list(ends)
