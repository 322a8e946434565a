"""Fault injection for one emulated API server (off by default).

Used by reliability tests: added latency on every API request, random 429 (with Retry-After)
and 500 answers to non-watch requests, and watch streams that end after a number of events as
if the connection had been dropped, so clients must resume from their last resourceVersion.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Faults:
    """What to inject. Rates are probabilities per request, in [0, 1]."""

    latency_s: float = 0.0
    error_rate_429: float = 0.0
    error_rate_500: float = 0.0
    drop_watch_after: int | None = None
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("latency_s", "error_rate_429", "error_rate_500"):
            if getattr(self, name) < 0:
                raise ValueError(f"Faults.{name} must be >= 0, got {getattr(self, name)}")
        if self.error_rate_429 + self.error_rate_500 > 1:
            raise ValueError("Faults.error_rate_429 + error_rate_500 must not exceed 1")
        if self.drop_watch_after is not None and self.drop_watch_after < 1:
            raise ValueError(f"Faults.drop_watch_after must be >= 1 or None, got {self.drop_watch_after}")
        self._rng = random.Random(self.seed)

    def pick_error(self) -> int | None:
        """429, 500 or None for the next non-watch request."""
        roll = self._rng.random()
        if roll < self.error_rate_429:
            return 429
        if roll < self.error_rate_429 + self.error_rate_500:
            return 500
        return None
