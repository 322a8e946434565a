"""Fault injection for one emulated API server (off by default).

Used by reliability tests: added latency on every API request, random 429 (with Retry-After)
and 500 answers to non-watch requests, watch streams that end after a number of events as if
the connection had been dropped, so clients must resume from their last resourceVersion, and
an expired history (as after an etcd compaction): a watch that resumes from a version older
than the expiry gets 410 Gone in its stream, as kube-apiserver sends it, and must list again.

A :class:`FaultSchedule` says which fault starts when, for how long; whoever runs the cluster
(the chaos benchmark) carries each step out (see :meth:`FaultSchedule.run`). The emulator's
steps act on its answers; the real control plane's (``KUBE_STEPS``) on its processes
(``sim/kube/controlplane.py``): etcd killed and started again, the API server restarted, a
donor's whole control plane lost.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Faults:
    """What to inject. Rates are probabilities per request, in [0, 1]."""

    latency_s: float = 0.0
    error_rate_429: float = 0.0
    error_rate_500: float = 0.0
    drop_watch_after: int | None = None
    seed: int | None = None
    # watches resuming from a resourceVersion below this get 410 Gone (0: none expired)
    expired_below: int = 0
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

    def expire_history(self, current_version: int | str) -> None:
        """Forget every resourceVersion before ``current_version``, as a compaction does."""
        self.expired_below = max(self.expired_below, int(current_version))

    def is_expired(self, resource_version: str | None) -> bool:
        """Whether a watch from ``resource_version`` must be answered 410 Gone."""
        if not resource_version or resource_version == "0" or not self.expired_below:
            return False  # "any" / "most recent": always served
        try:
            return int(resource_version) < self.expired_below
        except ValueError:
            return False


# ---- schedules ----------------------------------------------------------------------------------

#: the kinds of step a schedule may hold, with what the runner must do for each
STEP_KINDS = {
    "errors": "answer a share of API requests 429/500 for duration_s (rate_429, rate_500)",
    "watch_gone": "expire the history: resumed watches get 410 Gone and must relist",
    "watch_drop": "end every open watch stream now",
    "api_down": "the origin's API server refuses connections for duration_s",
    "peering_lost": "a donor's API server goes away and its virtual node turns NotReady for duration_s",
    "hub_kill": "kill -9 the hub process, then start it again",
    "pools_preempted": "delete every warm pool placeholder at once, grace period 0 (another workload preempts them)",
    # the real control plane's (sim/kube): its processes, not an emulator's answers
    "etcd_down": "SIGKILL the origin's etcd, and start it again on its data dir after duration_s",
    "apiserver_restart": "SIGKILL the origin's kube-apiserver and start it again at once",
    "donor_control_plane_lost": "SIGKILL every control-plane process of a donor (its virtual node NotReady), back after duration_s",
}

#: the steps each control plane can carry out
EMULATOR_STEPS = frozenset({"errors", "watch_gone", "watch_drop", "api_down", "peering_lost", "hub_kill", "pools_preempted"})
KUBE_STEPS = frozenset({"etcd_down", "apiserver_restart", "donor_control_plane_lost", "hub_kill", "pools_preempted"})


@dataclass(frozen=True)
class FaultStep:
    """One fault, ``at_s`` seconds after the schedule starts."""

    at_s: float
    kind: str
    duration_s: float = 0.0
    params: Mapping[str, float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ValueError(f"unknown fault step {self.kind!r}; known: {', '.join(STEP_KINDS)}")
        if self.at_s < 0 or self.duration_s < 0:
            raise ValueError("fault steps need at_s >= 0 and duration_s >= 0")


Action = Callable[[FaultStep], Awaitable[None]]


@dataclass
class FaultSchedule:
    """Steps in time order; :meth:`run` performs them with the caller's actions."""

    steps: list[FaultStep]
    done: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps = sorted(self.steps, key=lambda s: s.at_s)

    @property
    def length_s(self) -> float:
        return max((s.at_s + s.duration_s for s in self.steps), default=0.0)

    @classmethod
    def chaos(cls, span_s: float, donor: str = "donor-1") -> "FaultSchedule":
        """Every kind of fault, spread over ``span_s`` seconds (the chaos benchmark's schedule).

        The API server is down 10 s, the donor's peering lost for 10 s, the hub killed twice;
        the rest is spread between them.
        """
        t = max(span_s, 30.0) / 10
        return cls(
            [
                FaultStep(0.0, "errors", 2 * t, {"rate_429": 0.15, "rate_500": 0.10}),
                FaultStep(1.0 * t, "watch_drop"),
                FaultStep(1.5 * t, "hub_kill"),
                FaultStep(2.5 * t, "watch_gone"),
                FaultStep(3.0 * t, "api_down", 10.0),
                FaultStep(4.5 * t, "errors", 2 * t, {"rate_429": 0.20, "rate_500": 0.05}),
                FaultStep(5.0 * t, "peering_lost", 10.0, {"donor": donor}),
                FaultStep(6.5 * t, "watch_drop"),
                FaultStep(7.0 * t, "hub_kill"),
                FaultStep(8.0 * t, "watch_gone"),
                FaultStep(8.5 * t, "errors", 1 * t, {"rate_429": 0.25, "rate_500": 0.0}),
            ]
        )

    @classmethod
    def kube_chaos(cls, span_s: float, donor: str = "donor-1") -> "FaultSchedule":
        """The real control plane's faults over ``span_s`` seconds: the origin's etcd killed for
        8 s and its API server restarted while spawns are under way, the hub killed once, and
        last, once the arrivals are over, the donor's whole control plane lost for 15 s with the
        servers it took running there.

        They are spaced so that each outage ends before the next begins where a kube-apiserver
        comes back in 5 s; on a loaded 2-core machine it takes up to 30 s, and they overlap.
        The donor's loss comes after the warm pools' preemptions (``chaos_pools``): a pod
        deleted while its donor is away stays on the origin until Liqo can delete its twin, and
        the ledger check would measure the outage, not the ledger."""
        t = max(span_s, 60.0) / 10
        return cls(
            [
                FaultStep(1.0 * t, "etcd_down", 8.0),
                FaultStep(2.5 * t, "apiserver_restart"),
                FaultStep(4.5 * t, "hub_kill"),
                FaultStep(7.0 * t, "donor_control_plane_lost", 15.0, {"donor": donor}),
            ]
        )

    async def run(self, actions: Mapping[str, Action], clock: Callable[[], float] = time.monotonic) -> None:
        """Start each step at its time (steps with a duration run concurrently with later ones)."""
        missing = {s.kind for s in self.steps} - set(actions)
        if missing:
            raise ValueError(f"no action for fault step(s): {', '.join(sorted(missing))}")
        started = clock()
        running: list[asyncio.Task] = []
        try:
            for step in self.steps:
                await asyncio.sleep(max(0.0, started + step.at_s - clock()))
                log.info("fault %s at %.1fs", step.kind, clock() - started)
                self.done.append((round(clock() - started, 2), step.kind))
                running.append(asyncio.create_task(actions[step.kind](step)))
            await asyncio.gather(*running)
        finally:
            for task in running:
                task.cancel()
            # and wait for their own clean-up (an API server started again, a hub killed), so
            # that none of it happens after the caller has moved on to stopping everything
            await asyncio.gather(*running, return_exceptions=True)
