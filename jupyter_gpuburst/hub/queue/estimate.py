"""How long a queued GPU request will wait, and how the student is told (pure, no I/O).

Two bases, best first:

- *sessions*: the running servers and GPU kernels whose end is known (the GPU culler's idle
  or maximum-age deadline). A request gets its GPUs when as many held GPUs are back as it and
  every request ahead of it ask: the end of the session that frees the last of them, soonest
  first. A session may end earlier (the student stops it), so this is "about", never a promise.
- *history*: recent requests that waited and were placed; the wait per place in line they saw,
  times this request's place.

Without either the wait is "unknown": a guess would be worse than saying so.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable
from dataclasses import dataclass

SESSIONS = "sessions"
HISTORY = "history"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Estimate:
    """The expected wait in seconds (None: unknown) and what it is based on."""

    seconds: float | None
    basis: str

    def as_dict(self) -> dict[str, object]:
        return {"seconds": None if self.seconds is None else round(self.seconds), "basis": self.basis, "text": wait_text(self)}


class WaitHistory:
    """The waits of the last ``size`` requests that left the queue placed, within ``window_s``."""

    def __init__(self, size: int = 20, window_s: float = 3600.0) -> None:
        self.window_s = window_s
        self._served: collections.deque[tuple[float, float, int]] = collections.deque(maxlen=size)

    def record(self, now: float, waited_s: float, position: int) -> None:
        """A request that joined the queue at ``position`` was placed after ``waited_s``."""
        if waited_s >= 0 and position >= 1:
            self._served.append((now, waited_s, position))

    def per_place(self, now: float) -> float | None:
        """Seconds of waiting per place in line, over the recent placed requests; None if none."""
        recent = [(waited, position) for at, waited, position in self._served if now - at <= self.window_s]
        if not recent:
            return None
        return sum(w for w, _ in recent) / sum(p for _, p in recent)


def estimate(position: int, needed: int, ends: Iterable[tuple[float, int]], per_place_s: float | None) -> Estimate:
    """The wait of the request ``position`` (1-based) in line.

    ``needed``: the GPUs of its type that it and the requests ahead of it ask together;
    ``ends``: (seconds until it ends, GPUs it holds) of each running session of that GPU type
    whose end is known; ``per_place_s``: ``WaitHistory.per_place``.
    """
    if position < 1:
        return Estimate(None, UNKNOWN)
    needed = max(1, needed)
    freed = 0
    for seconds, gpus in sorted(ends):
        freed += max(0, gpus)
        if freed >= needed:
            return Estimate(max(0.0, seconds), SESSIONS)
    if per_place_s is not None:
        return Estimate(per_place_s * position, HISTORY)
    return Estimate(None, UNKNOWN)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def wait_text(wait: Estimate) -> str:
    """'about 4 min', 'less than a minute', 'about 2 h', or 'wait time unknown'."""
    if wait.seconds is None:
        return "wait time unknown"
    if wait.seconds < 60:
        return "less than a minute"
    minutes = math.ceil(wait.seconds / 60)
    if minutes < 90:
        return f"about {minutes} min"
    return f"about {round(minutes / 60)} h"


def line_message(position: int, wait: Estimate, what: str = "a GPU") -> str:
    """'You are 3rd in line for a GPU (about 4 min).', as the spawn page and the panel say it."""
    place = "next" if position == 1 else ordinal(position)
    return f"You are {place} in line for {what} ({wait_text(wait)})."
