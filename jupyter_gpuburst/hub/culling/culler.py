"""The culling loop: every period, each GPU server and GPU kernel the hub runs is kept, warned or stopped.

Servers stop through JupyterHub's own REST API (``DELETE /hub/api/users/<name>/servers/<server>``,
as jupyterhub-idle-culler stops them), with the ``gpuburst`` service's token, so the proxy route,
the spawner and the database are cleaned up by the hub exactly as for any other stop. GPU kernels
stop through the hub's kernel registry: deleting the kernel's pod frees its GPU. The targets are
the hub's own: its running spawners and its kernel records (rebuilt from the pod watch after a
restart), so a server that never reports still meets the maximum age, the budget and the silence
limit; idleness alone needs the server's report. Nothing is stopped on a guess: a target whose
server went silent is unknown, never idle (it is stopped only at ``silent_seconds``), a stop needs
a warning the server could have shown first, and a stop of something already gone is logged and
dropped.
A GPU server or kernel whose user's GPU-hour budget is used up is warned and stopped the same way
(culling/budget.py), whether or not idle culling is on.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.hub.culling.budget import MORE_HOURS, BudgetWatch, sooner
from jupyter_gpuburst.hub.culling.policy import Decision, decide, duration
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.culling.store import SERVER, Signal, SignalStore, Stopped

# the quickest a sweep follows the last one, and how far past a due time it wakes (float rounding)
MIN_SWEEP_S = 0.1
SWEEP_MARGIN_S = 0.02

# the spawn page's template variable: why the culler stopped the user's server, or ""
TEMPLATE_VAR = "gpuburst_stopped"


@dataclass
class Target:
    """A GPU server or kernel (or a reported CPU server), as the hub knows it now."""

    signal: Signal
    profile: str
    site_kind: str
    groups: frozenset[str]
    age_s: float | None
    handle: Any  # the spawner, or the kernel record
    admin: bool = False
    holds_gpu: bool = True  # a GPU kernel, or a server placed with GPUs (not a CPU server)


class Culler:
    """One per hub process: the store the activity API writes and the loop that acts on it."""

    def __init__(
        self,
        settings: GPUCullingSettings,
        hub: Any,
        registry_source: Callable[[Any], Awaitable[Any]] | None = None,
        *,
        stop_server: Callable[[str, str], Awaitable[str]],
        log: logging.Logger | None = None,
        budgets: BudgetWatch | None = None,
        servers: Callable[[], Iterable[tuple[str, str]]] | None = None,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.store = SignalStore(stale_after_s=3 * settings.period_seconds)
        self.registry_source = registry_source
        self._stop_server = stop_server
        self.log = log or logging.getLogger(__name__)
        self.budgets = budgets  # None: no budget stops (no budgets, or accounting off)
        # (user, server name) of every server the hub runs: its spawners, not its servers' reports
        self.servers = servers
        # (user, kernel record id) -> when the culler asked its server to shut it down
        self._asked: dict[tuple[str, str], float] = {}
        self._task: asyncio.Task | None = None
        self._silent: set[tuple[str, str, str]] = set()
        self._culling: dict[tuple[str, str, str], asyncio.Task] = {}  # stops under way
        self._budgets_read_at: float | None = None
        self.stops: list[dict[str, Any]] = []  # for benchmarks and tests: what was stopped when
        # a sweep runs once a period, and also when the next warning or stop falls due, so a
        # stop lands within one of the server's samples after its timeout, not a period later
        self.next_sweep_s = settings.period_seconds
        self.stopped_servers: dict[tuple[str, str], tuple[str, float]] = {}

    # ---- what the hub knows ---------------------------------------------------------------
    async def registry(self) -> Any:
        if self.registry_source is None:
            return None
        try:
            return await self.registry_source(self.hub)
        except Exception:  # noqa: BLE001 - no registry: kernels are unknown this sweep, never idle
            self.log.warning("GPU culling: the kernel registry is unavailable; no GPU kernel is culled this sweep", exc_info=True)
            return None

    def kernel_record(self, registry: Any, user: str, record_id: str) -> Any:
        if registry is None:
            return None
        try:
            return registry.get(user, record_id)
        except Exception:  # noqa: BLE001 - KernelError 404: gone
            return None

    async def targets(self, now: float | None = None) -> list[Target]:
        """Every GPU server and GPU kernel the hub runs, reported or not (its spawners, its kernel
        records), and every reported server; what no longer runs is forgotten. A student who
        silences their server's report still meets the maximum age, the budget and the silence
        limit, which come from these records alone."""
        registry = await self.registry()
        now = time.time() if now is None else now
        self._find(registry, now)
        out = []
        for signal in list(self.store.signals.values()):
            spawner = self.hub.active_spawner(signal.user, signal.server_name)
            if spawner is None:
                self.store.forget(signal)
                continue
            if signal.kind == SERVER:
                out.append(self._server_target(signal, spawner, now))
                continue
            if registry is None:
                continue
            record = self.kernel_record(registry, signal.user, signal.target)
            if record is None:
                self.store.forget(signal)
                continue
            site = record.placement.site if record.placement is not None else "origin"
            groups, admin = self.hub.groups(signal.user), _admin(spawner)
            out.append(
                Target(signal, record.profile.slug, "origin" if site == "origin" else "donor", groups, now - record.created, record, admin)
            )
        if registry is not None:
            live = {(t.signal.user, t.signal.target) for t in out if t.signal.kind != SERVER}
            self._asked = {key: at for key, at in self._asked.items() if key in live}
        return out

    def _server_target(self, signal: Signal, spawner: Any, now: float) -> Target:
        placement = getattr(spawner, "_gb_placement", None)
        site = getattr(placement, "site", "origin") or "origin"
        started = _started(spawner)
        age = None if started is None else now - started
        profile = str((getattr(spawner, "user_options", None) or {}).get("profile") or "")
        site_kind = "origin" if site == "origin" else "donor"
        return Target(signal, profile, site_kind, self.hub.groups(signal.user), age, spawner, _admin(spawner), _holds_gpu(spawner))

    def _find(self, registry: Any, now: float) -> None:
        """File each GPU server and GPU kernel the hub runs that never reported, found ``now``."""
        if self.servers is not None:
            for user, server_name in self.servers():
                if self.store.get(user, server_name, SERVER) is None:
                    spawner = self.hub.active_spawner(user, server_name)
                    if spawner is not None and _holds_gpu(spawner):
                        self.store.found(user, server_name, SERVER, now)
        if registry is None:
            return
        # kernel pods the hub started, or rebuilt from the pod watch after a restart: one its
        # server never heard was started (the hub restarted before answering) reports nothing
        for record in registry.all_records():
            if record.state in ("pending", "running") and record.placement is not None:
                self.store.found(record.user, record.server_name, record.id, now)

    async def session_ends(self, resource: str) -> list[tuple[float, int]]:
        """(seconds until this culler stops it, GPUs of ``resource`` it holds) for each server
        and GPU kernel whose stop is foreseen, for the queue's estimate (``hub.queue.ends``)."""
        now = time.time()
        ends = []
        for target in await self.targets(now):
            # a server's spawner or a kernel's record: both know where their GPUs were placed
            placement = getattr(target.handle, "_gb_placement", None) or getattr(target.handle, "placement", None)
            if placement is None or placement.resource != resource:
                continue
            decision = self.decision(target, now)
            if decision.action == "stop":
                ends.append((0.0, placement.count))
            elif decision.stops_in_s is not None:
                ends.append((decision.stops_in_s, placement.count))
        return ends

    def decision(self, target: Target, now: float) -> Decision:
        policy = self.settings.policy(target.signal.kind, target.profile)
        state = self.store.state(target.signal, now)
        idle = decide(
            target.signal,
            state,
            policy,
            now,
            age_s=target.age_s,
            site_kind=target.site_kind,
            groups=target.groups,
            holds_gpu=target.holds_gpu,
        )
        if self.budgets is None or target.admin or not target.holds_gpu:
            return idle
        return sooner(idle, self.budgets.decision(target.signal.user, now))

    async def refresh_budgets(self, targets: list[Target], now: float) -> None:
        """Read the budgets of the users whose GPUs are watched (admins are exempt), once a
        period: sweeps also run whenever a warning or stop falls due, and each read asks the
        ledger about every such user."""
        if self.budgets is None:
            return
        if self._budgets_read_at is not None and 0 <= now - self._budgets_read_at < self.settings.period_seconds:
            return
        self._budgets_read_at = now
        users = {t.signal.user: (t.groups, t.admin) for t in targets if t.holds_gpu and not t.admin}
        await self.budgets.refresh(users, now)

    # ---- the loop -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._culling.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.next_sweep_s)
            try:
                await self.sweep(wait=False)
            except Exception:  # noqa: BLE001 - a bad sweep must not end culling for good
                self.next_sweep_s = self.settings.period_seconds
                self.log.exception("GPU culling: a sweep failed; the next one runs in %s s", self.settings.period_seconds)

    async def sweep(self, now: float | None = None, wait: bool = True) -> list[dict[str, Any]]:
        """One pass; with ``wait``, returns what it stopped once every stop it began has ended
        (the loop does not wait). Donors' stops begin first, so that when the hub is stopped
        mid-sweep, borrowed GPUs are the ones already on their way back."""
        now = time.time() if now is None else now
        targets = await self.targets(now)
        await self.refresh_budgets(targets, now)
        targets.sort(key=lambda t: t.site_kind != "donor")
        stopped: list[dict[str, Any]] = []
        started: list[asyncio.Task] = []
        due: list[float] = [self.settings.period_seconds]
        for target in targets:
            decision = self.decision(target, now)
            due.append(self._due_in(target, decision, now))
            signal = target.signal
            key = (signal.user, signal.server_name, signal.target)
            silent = self.store.state(signal, now) == "unknown"
            if silent and key not in self._silent:
                self._silent.add(key)
                self.log.warning(
                    "GPU culling: no GPU activity report for %s's %s for %.0f s; its GPU state is unknown (%s)",
                    signal.user,
                    _what(signal),
                    signal.silent_s(now),
                    self._silence_rule(target),
                )
            elif not silent:
                self._silent.discard(key)
            if decision.action in ("active", "off", "exempt", "no-gpu"):
                # busy again, or hours granted: the next stop needs a warning of its own
                signal.warned_at = None
            if decision.action == "warn" and signal.warned_at is None:
                signal.warned_at = now
                stops = "runs on (warned only)" if decision.stops_in_s is None else f"stops in {decision.stops_in_s:.0f} s"
                self.log.info("GPU culling: warning %s: %s %s (%s)", signal.user, _what(signal), stops, decision.reason)
            elif decision.action == "stop":
                warning_s = self.warning_s(target, decision)
                if warning_s > 0 and (signal.warned_at is None or now - signal.warned_at < min(warning_s, self.settings.period_seconds)):
                    # never stop what the student could not have been warned about (a first
                    # report that is already past the timeout, after a hub restart)
                    if signal.warned_at is None:
                        signal.warned_at = now
                        self.log.info(
                            "GPU culling: warning %s first: %s is past its limit (%s)", signal.user, _what(signal), decision.reason
                        )
                    continue
                if key in self._culling:
                    continue  # its stop is under way
                # stops run side by side: JupyterHub answers a stop only once the server is
                # gone (up to its slow_stop_timeout), and one slow stop must not make the
                # others, or the next sweep, late; they start in this order, donors first
                task = asyncio.ensure_future(self._cull_logged(target, decision.reason, now, decision.cause))
                self._culling[key] = task
                task.add_done_callback(lambda _, key=key: self._culling.pop(key, None))
                started.append(task)
        self.next_sweep_s = max(MIN_SWEEP_S, min(due))
        if wait:
            stopped = [done for done in await asyncio.gather(*started) if done is not None]
        return stopped

    async def _cull_logged(self, target: Target, reason: str, now: float, cause: str) -> dict[str, Any] | None:
        try:
            return await self.cull(target, reason, now, cause)
        except Exception:  # noqa: BLE001 - one failed stop must not keep the others
            signal = target.signal
            self.log.exception("GPU culling: stopping %s's %s failed; it is tried again next sweep", signal.user, _what(signal))
            return None

    def _due_in(self, target: Target, decision: Decision, now: float) -> float:
        """Seconds until this target's next warning or stop, if it stays as idle as reported."""
        if decision.stops_in_s is None:
            return math.inf
        warning_s = self.warning_s(target, decision)
        if decision.action == "stop":
            # a stop that waits for its warning to have been seen (the sweep's rule above) is due
            # when that wait ends; one already asked for is retried once a period
            warned_at = target.signal.warned_at if target.signal.warned_at is not None else now
            waits_s = min(warning_s, self.settings.period_seconds) - (now - warned_at)
            return waits_s + SWEEP_MARGIN_S if waits_s > 0 else math.inf
        if decision.stops_in_s > warning_s:
            return decision.stops_in_s - warning_s + SWEEP_MARGIN_S
        return decision.stops_in_s + SWEEP_MARGIN_S

    def _silence_rule(self, target: Target) -> str:
        """What happens to ``target`` while it stays silent, for the log."""
        policy = self.settings.policy(target.signal.kind, target.profile)
        if policy.enabled and policy.silent_s > 0 and target.holds_gpu:
            return f"stopped once silent for {duration(policy.silent_s)}"
        return "kept"

    def warning_s(self, target: Target, decision: Decision) -> float:
        """How long before its stop a target is warned: its profile's, or the budget's grace."""
        if decision.cause == "budget" and self.budgets is not None:
            return self.budgets.rule.grace_s
        return self.settings.policy(target.signal.kind, target.profile).warning_s

    async def cull(self, target: Target, reason: str, now: float, cause: str = "idle") -> dict[str, Any] | None:
        signal = target.signal
        entry = {
            "user": signal.user,
            "server_name": signal.server_name,
            "target": signal.target,
            "site_kind": target.site_kind,
            "reason": reason,
            "cause": cause,
            "at": now,
        }
        # a budget's stop cannot be undone by starting again: the student needs more hours
        then = MORE_HOURS if cause == "budget" else None
        if signal.kind == SERVER:
            # JupyterHub drops a stopped server's spawner: the note is kept here for the spawn page
            self.stopped_servers[(signal.user, signal.server_name)] = (
                f"Your server was stopped because {reason}. {then or 'Start it again when you need a GPU.'}",
                now,
            )
            self.log.info("GPU culling: stopping %s's server %r: %s", signal.user, signal.server_name, reason)
            outcome = await self._stop_server(signal.user, signal.server_name)
            self.store.forget(signal)
            if outcome == "gone":
                self.log.info("GPU culling: %s's server %r was already stopped", signal.user, signal.server_name)
                return None
            self.store.forget_server(signal.user, signal.server_name)
        else:
            registry = await self.registry()
            record = self.kernel_record(registry, signal.user, signal.target)
            if record is None:
                self.store.forget(signal)
                self.log.info("GPU culling: %s's GPU kernel %s was already gone", signal.user, signal.target)
                return None
            asked = self._asked.get((signal.user, record.id))
            if asked is None:
                message = f"This GPU kernel was stopped because {reason}. {then or 'Restart the kernel to start it again on a free GPU.'}"
                # the server hears first and shuts the kernel down itself (through the registry,
                # as any shutdown), so the notebook sees a kernel shut down, not one that died;
                # meanwhile the hub refuses a restart of it
                self.store.stopped.append(Stopped(signal.user, signal.server_name, signal.kernel_id, message, now))
                self.log.info("GPU culling: stopping %s's GPU kernel %s on %s: %s", signal.user, signal.target, target.site_kind, reason)
                if signal.kernel_id:
                    # the hub's own note of the ask, not the server's word: a server that hears
                    # and then neither shuts the kernel down nor reports it still loses it
                    self._asked[(signal.user, record.id)] = now
                    return None
            elif now - asked < 2 * self.settings.period_seconds:
                return None
            else:
                self.log.info("GPU culling: %s's server did not shut GPU kernel %s down; deleting its pod", signal.user, signal.target)
            await registry.stop(record, wait=0)
            self._asked.pop((signal.user, record.id), None)
            self.store.forget(signal)
        self.stops.append(entry)
        return entry

    async def stop_kernel(self, registry: Any, record: Any, message: str, now: float | None = None) -> None:
        """Stop a GPU kernel now (an admin's stop): as for a culled one, its server hears
        ``message`` in its next reply and shuts the kernel down, and until then the hub refuses
        to start it again; its pod is deleted at once."""
        now = time.time() if now is None else now
        if record.kernel_id:
            self.store.stopped.append(Stopped(record.user, record.server_name, record.kernel_id, message, now))
        await registry.stop(record, wait=0)
        signal = self.store.get(record.user, record.server_name, record.id)
        if signal is not None:
            self.store.forget(signal)

    # ---- what a server's report gets back ---------------------------------------------------
    async def reply(self, user: str, server_name: str, now: float | None = None) -> dict[str, Any]:
        """The culling state of one server and its GPU kernels, for its Lab panel."""
        now = time.time() if now is None else now
        spawner = self.hub.active_spawner(user, server_name)
        note = self.stopped_servers.get((user, server_name))
        if spawner is not None and note is not None:
            started = _started(spawner)
            if started is not None and started > note[1]:
                # it runs again since the stop: the spawn page's note is done
                self.stopped_servers.pop((user, server_name), None)
        # budgets as of the last sweep: a report's reply reads no ledger
        targets = [t for t in await self.targets(now) if t.signal.user == user and t.signal.server_name == server_name]
        items = []
        for target in targets:
            decision = self.decision(target, now)
            policy = self.settings.policy(target.signal.kind, target.profile)
            items.append(
                {
                    "target": target.signal.target,
                    "kind": target.signal.kind,
                    "kernel_id": target.signal.kernel_id,
                    "state": decision.action,
                    "idle_s": decision.idle_s,
                    "stops_in_s": decision.stops_in_s,
                    "warned": target.signal.warned_at is not None,
                    "keepable": decision.keepable,
                    "keeps_left": max(0, policy.keep_limit - target.signal.keeps),
                    "basis": target.signal.basis,
                    "reason": decision.reason,
                    "cause": decision.cause,
                    "policy": policy.public(target.site_kind),
                }
            )
        stopped = []
        for stop in self.store.stopped_for(user, server_name):
            stopped.append({"kernel_id": stop.kernel_id, "reason": stop.reason, "at": stop.at})
            stop.delivered = True
        return {
            "period_s": self.settings.period_seconds,
            "threshold": self.settings.threshold,
            "threshold_by_kernel": {
                t.signal.target: self.settings.policy("kernel", t.profile).threshold for t in targets if t.signal.kind != SERVER
            },
            "targets": items,
            "stopped": stopped,
        }

    async def keep(self, user: str, server_name: str, target: str, now: float | None = None) -> tuple[int, str]:
        """The student's Keep; (status, sentence)."""
        now = time.time() if now is None else now
        signal = self.store.get(user, server_name, target)
        match = [t for t in await self.targets(now) if t.signal is signal] if signal is not None else []
        if not match:
            return 404, "nothing of yours with that name is being watched for GPU idleness"
        policy = self.settings.policy(signal.kind, match[0].profile)
        if not self.store.keep(signal, policy.keep_limit, now):
            return 409, f"Keep was already used {policy.keep_limit} times for this {_what(signal)}; the GPU goes back when idle"
        self.log.info("GPU culling: %s keeps %s (%d of %d)", user, _what(signal), signal.keeps, policy.keep_limit)
        return 200, f"kept: the idle time starts again ({policy.keep_limit - signal.keeps} keeps left)"


def _started(spawner: Any) -> float | None:
    """When the server started (JupyterHub keeps naive UTC datetimes), or None."""
    started = getattr(getattr(spawner, "orm_spawner", None), "started", None)
    if started is None:
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=datetime.timezone.utc)
    return started.timestamp()


def _admin(spawner: Any) -> bool:
    return bool(getattr(getattr(spawner, "user", None), "admin", False))


def _holds_gpu(spawner: Any) -> bool:
    """Whether a server was placed with GPUs; after a hub restart only its saved placement says it."""
    placement = getattr(spawner, "_gb_placement", None)
    restored = getattr(spawner, "gpuburst_placement", None)
    return bool(getattr(placement, "count", 0)) or bool(isinstance(restored, dict) and restored.get("count"))


def held_resource(spawner: Any) -> str | None:
    """The GPU resource a server was placed with (None: no GPU, or no such server)."""
    if spawner is None or not _holds_gpu(spawner):
        return None
    placement = getattr(spawner, "_gb_placement", None)
    restored = getattr(spawner, "gpuburst_placement", None)
    resource = getattr(placement, "resource", None) or (restored.get("resource") if isinstance(restored, dict) else None)
    return resource if isinstance(resource, str) and resource else None


def _what(signal: Signal) -> str:
    return f"server {signal.server_name!r}" if signal.kind == SERVER else f"GPU kernel {signal.target}"
