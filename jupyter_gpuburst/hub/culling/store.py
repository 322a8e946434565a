"""When each server's and GPU kernel's GPUs were last busy, as their servers report it.

Reports carry ages ("idle for 312 s"), measured on the reporting pod's own monotonic clock, never
timestamps: the hub turns an age into a time on its own clock, so a pod whose clock is hours off
reports as truthfully as one in sync. Each server process numbers its reports (``boot``, ``seq``);
a report that is not newer than the last one accepted is refused as replayed. A target whose
last report is older than ``stale_after_s`` is unknown: never idle, but silence has a limit of its
own (``GPUCullingSettings.silent_seconds``). The culler also files here each GPU server and kernel
the hub runs that never reported (``found``), so that limits from the hub's own facts hold for it.

A report may also carry ``use``, for the server and for each GPU kernel: what its GPUs used
since the previous report (peak memory, the devices' memory, peak utilization, and a sum and
count of utilization samples for a mean). The store checks it and hands it on (``on_use``) to
the GPU-hours ledger's right-sizing; culling does not read it. The report and each GPU kernel's
entry may also say how long ago the first cell of the server's own kernels, or of that kernel,
began (``first_cell_ago_s``), handed on (``on_first_cell``) as a time on the hub's clock for a
lab's report; culling does not read it either.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

BASES = ("utilization", "memory", "kernel")
MAX_IDLE_S = 30 * 24 * 3600.0
MAX_KERNELS = 256
BOOTS_REMEMBERED = 8  # a server restarted more often than this between two culls is rare
SERVER = "server"
MAX_MEMORY_BYTES = float(2**50)  # a PiB: more than any pod's GPUs hold
MAX_SAMPLES = 100_000
USE_FIELDS = ("peak_memory_bytes", "memory_total_bytes", "peak_utilization", "utilization_sum", "utilization_samples")


class ReportError(Exception):
    """A report the hub refuses; ``message`` is short and safe to return."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Signal:
    """What the hub knows of one server's or one GPU kernel's GPUs."""

    user: str
    server_name: str
    target: str  # SERVER, or a GPU kernel's record id
    kernel_id: str = ""  # the kernel's id in its server (jupyter_server's), for kernels
    last_busy: float | None = None  # hub clock; None: no GPU readable (never idle)
    reported_at: float = 0.0  # hub clock
    basis: str = "utilization"
    kept_at: float = 0.0
    keeps: int = 0
    warned_at: float | None = None
    found_at: float = 0.0  # hub clock: when the culler found it running without a report

    @property
    def kind(self) -> str:
        return SERVER if self.target == SERVER else "kernel"

    def idle_s(self, now: float) -> float | None:
        if self.last_busy is None:
            return None
        return max(0.0, now - max(self.last_busy, self.kept_at))

    def silent_s(self, now: float) -> float:
        """Seconds since its last report, or since the hub found it running if it never reported."""
        return max(0.0, now - (self.reported_at or self.found_at))


@dataclass
class Stopped:
    """A GPU kernel the culler stopped: its server hears why in its next reply, and until then
    the hub does not start it again on its own (the kernel restarter would otherwise)."""

    user: str
    server_name: str
    kernel_id: str
    reason: str
    at: float
    delivered: bool = False


@dataclass
class SignalStore:
    stale_after_s: float = 180.0
    signals: dict[tuple[str, str, str], Signal] = field(default_factory=dict)
    # per server, the last report number of each of its latest boots: a report recorded under an
    # earlier boot stays a replay after the server restarted (and a test's or a second writer's
    # reports do not reset the server's own numbering)
    sequence: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    stopped: list[Stopped] = field(default_factory=list)

    def report(
        self, user: str, body: Any, owns_kernel: Any, now: float | None = None, on_use: Any = None, on_first_cell: Any = None
    ) -> tuple[str, list[str]]:
        """Record one server's report; returns (server name, kernel ids ignored).

        ``owns_kernel(record_id, server_name) -> kernel_id | None`` says whether the record is a
        GPU kernel of this user's server; entries for any other are ignored (and logged by the
        caller), never stored. ``on_use(server_name, target, figures)`` hears each accepted
        ``use`` (the server's, target "server", and each of its own GPU kernels').
        ``on_first_cell(server_name, target, began)`` hears, for the server and each of its own
        GPU kernels that says so, when its first cell began (hub clock).
        """
        now = time.time() if now is None else now
        if not isinstance(body, dict):
            raise ReportError(400, "an activity report is a JSON object")
        unknown = set(body) - {"server_name", "boot", "seq", "gpu_idle_s", "basis", "kernels", "use", "first_cell_ago_s"}
        if unknown:
            raise ReportError(400, f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
        server_name = body.get("server_name", "")
        boot, seq = body.get("boot"), body.get("seq")
        if not isinstance(server_name, str) or len(server_name) > 255:
            raise ReportError(400, "server_name must be a string")
        if not isinstance(boot, str) or not 1 <= len(boot) <= 64:
            raise ReportError(400, "boot must be a string of 1-64 characters")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ReportError(400, "seq must be a whole number of at least 0")
        idle = _idle(body.get("gpu_idle_s"), "gpu_idle_s")
        basis = _basis(body.get("basis", "utilization"))
        use = _use(body.get("use"))
        first_cell = _idle(body.get("first_cell_ago_s"), "first_cell_ago_s")
        kernels = body.get("kernels") or {}
        if not isinstance(kernels, dict) or len(kernels) > MAX_KERNELS:
            raise ReportError(400, f"kernels must be an object of at most {MAX_KERNELS} GPU kernels")
        parsed: dict[str, tuple[float | None, str, str]] = {}
        kernel_use: dict[str, dict[str, Any]] = {}
        first_cells: dict[str, float] = {}
        for record_id, entry in kernels.items():
            if not isinstance(entry, dict):
                raise ReportError(400, "each kernel's entry is an object")
            kernel_id = entry.get("kernel_id", "")
            if not isinstance(kernel_id, str):
                raise ReportError(400, "kernel_id must be a string")
            parsed[str(record_id)] = (_idle(entry.get("idle_s"), "idle_s"), _basis(entry.get("basis", "utilization")), kernel_id)
            kernel_first_cell = _idle(entry.get("first_cell_ago_s"), "first_cell_ago_s")
            if kernel_first_cell is not None:
                first_cells[str(record_id)] = now - kernel_first_cell
            figures = _use(entry.get("use"))
            if figures is not None:
                kernel_use[str(record_id)] = figures
        boots = self.sequence.setdefault((user, server_name), {})
        last = boots.get(boot)
        if last is not None and seq <= last:
            raise ReportError(409, f"report {seq} is not newer than report {last} (replayed or out of order); ignored")
        boots.pop(boot, None)  # the latest boot last, so the oldest is the one forgotten
        boots[boot] = seq
        while len(boots) > BOOTS_REMEMBERED:
            del boots[next(iter(boots))]
        self._put(user, server_name, SERVER, "", idle, basis, now)
        if use is not None and on_use is not None:
            on_use(server_name, SERVER, use)
        if first_cell is not None and on_first_cell is not None:
            on_first_cell(server_name, SERVER, now - first_cell)
        ignored = []
        for record_id, (kernel_idle, kernel_basis, kernel_id) in parsed.items():
            if not owns_kernel(record_id, server_name):
                ignored.append(record_id)
                continue
            self._put(user, server_name, record_id, kernel_id, kernel_idle, kernel_basis, now)
            if record_id in kernel_use and on_use is not None:
                on_use(server_name, record_id, kernel_use[record_id])
            if record_id in first_cells and on_first_cell is not None:
                on_first_cell(server_name, record_id, first_cells[record_id])
        # a stopped kernel's server has heard why once it no longer reports the kernel
        reported = {k for _, _, k in parsed.values()}
        for stop in self.stopped:
            if stop.user == user and stop.server_name == server_name and stop.delivered and stop.kernel_id not in reported:
                stop.kernel_id = ""
        self.stopped = [s for s in self.stopped if s.kernel_id and now - s.at < 3600]
        return server_name, ignored

    def _put(self, user: str, server_name: str, target: str, kernel_id: str, idle: float | None, basis: str, now: float) -> None:
        key = (user, server_name, target)
        signal = self.signals.get(key)
        if signal is None:
            signal = self.signals[key] = Signal(user, server_name, target, kernel_id)
        signal.kernel_id = kernel_id or signal.kernel_id
        signal.reported_at = now
        signal.basis = basis
        signal.last_busy = None if idle is None else now - idle

    def state(self, signal: Signal, now: float) -> str:
        """``unknown`` (silent too long), ``no-gpu`` (nothing readable), else ``reported``."""
        if now - signal.reported_at > self.stale_after_s:
            return "unknown"
        if signal.last_busy is None:
            return "no-gpu"
        return "reported"

    def found(self, user: str, server_name: str, target: str, now: float) -> Signal:
        """The signal of a GPU server or kernel the hub runs, reported or not: one never heard
        of is filed as found ``now``, silent from then on."""
        key = (user, server_name, target)
        signal = self.signals.get(key)
        if signal is None:
            signal = self.signals[key] = Signal(user, server_name, target, found_at=now)
        return signal

    def get(self, user: str, server_name: str, target: str) -> Signal | None:
        return self.signals.get((user, server_name, target))

    def of_server(self, user: str, server_name: str) -> list[Signal]:
        return [s for s in self.signals.values() if s.user == user and s.server_name == server_name]

    def forget(self, signal: Signal) -> None:
        self.signals.pop((signal.user, signal.server_name, signal.target), None)

    def forget_server(self, user: str, server_name: str) -> None:
        for signal in self.of_server(user, server_name):
            self.forget(signal)
        self.sequence.pop((user, server_name), None)

    def keep(self, signal: Signal, limit: int, now: float | None = None) -> bool:
        """The student's Keep: counts as GPU activity now, at most ``limit`` times."""
        if signal.keeps >= limit:
            return False
        signal.keeps += 1
        signal.kept_at = time.time() if now is None else now
        signal.warned_at = None
        return True

    def refuses_start(self, user: str, server_name: str, kernel_id: str) -> str | None:
        """Why a start of ``kernel_id`` is refused: the culler stopped it and its server has not
        heard yet (a kernel restarter restarting it would take the GPU straight back)."""
        for stop in self.stopped:
            if kernel_id and (stop.user, stop.server_name, stop.kernel_id) == (user, server_name, kernel_id) and not stop.delivered:
                return stop.reason
        return None

    def stopped_for(self, user: str, server_name: str) -> list[Stopped]:
        return [s for s in self.stopped if s.user == user and s.server_name == server_name]


def _idle(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= MAX_IDLE_S:
        raise ReportError(400, f"{name} must be null or a number of seconds from 0 to {int(MAX_IDLE_S)}")
    return float(value)


def _use(value: Any) -> dict[str, Any] | None:
    """A report's ``use``: None, or an object of ``USE_FIELDS`` (memory in bytes, utilization as
    a fraction 0-1, a sum of utilization samples and their count), each checked."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReportError(400, "use must be null or an object")
    unknown = set(value) - set(USE_FIELDS)
    if unknown:
        raise ReportError(400, f"use: unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {}
    for name in ("peak_memory_bytes", "memory_total_bytes"):
        out[name] = _number(value.get(name), f"use.{name}", MAX_MEMORY_BYTES, "a number of bytes")
    out["peak_utilization"] = _number(value.get("peak_utilization"), "use.peak_utilization", 1.0, "a fraction")
    samples = value.get("utilization_samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or not 0 <= samples <= MAX_SAMPLES:
        raise ReportError(400, f"use.utilization_samples must be a whole number from 0 to {MAX_SAMPLES}")
    out["utilization_samples"] = samples
    total = _number(value.get("utilization_sum", 0.0), "use.utilization_sum", float(samples), "a number")
    out["utilization_sum"] = total or 0.0
    return out


def _number(value: Any, name: str, most: float, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= most:
        raise ReportError(400, f"{name} must be null or {what} from 0 to {most:g}")
    return float(value)


def _basis(value: Any) -> str:
    if value not in BASES:
        raise ReportError(400, f"basis must be one of {', '.join(BASES)}")
    return value
