"""Who used the machine's CPUs while a benchmark ran: tells a time the machine imposed from a wait.

A figure measured on a small machine raises one question first: was the machine full? Every
``period`` seconds this reads the CPU time of every process (psutil) and the machine's busy
time, and gives each process the role of the process it descends from: the hub (and the proxy
it started), the federation emulator (and the pods its kubelets started), the benchmark itself,
or nothing of these ("other": the rest of the machine). A single-threaded process (the hub,
the emulator) is full at one core, however idle the machine is, so each role's busiest
period is reported besides its total.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import psutil

PERIOD_S = 2.0
OTHER = "other"
CONTROL_PLANE = "control plane"  # every site's etcd, kube-apiserver, ... (the real control plane's)


class CPUShare:
    """Samples of CPU time by role; ``roots`` name a process (or several: a real control plane's
    etcd, kube-apiserver, ...) whose descendants take the role ``children[name]`` (the process's
    own name where ``children`` has none)."""

    def __init__(self, roots: dict[str, int | Iterable[int]], children: dict[str, str] | None = None, period: float = PERIOD_S):
        self.roots = {pid: name for name, pids in roots.items() for pid in ([pids] if isinstance(pids, int) else pids)}
        self.children = children or {}
        self.period = period
        self._start: dict[tuple[int, float], float] = {}  # a process's CPU seconds when first seen
        self._last: dict[tuple[int, float], tuple[str, float]] = {}
        self._previous: dict[str, float] = {}
        self._peak: dict[str, float] = defaultdict(float)  # a role's busiest period, in cores
        self._busy: list[float] = []  # the machine's busy share in each period
        self._machine: tuple[float, float] | None = None
        self._t0: float | None = None
        self._t: float | None = None

    def sample(self) -> None:
        """One look at every process (blocking: about 30 µs a process; call it in a thread)."""
        now = time.monotonic()
        times = psutil.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times)
        ppid: dict[int, int] = {}
        cpu: dict[tuple[int, float], float] = {}
        for proc in psutil.process_iter(["ppid", "cpu_times", "create_time"]):
            info = proc.info
            if info["cpu_times"] is None or info["create_time"] is None:
                continue  # gone, or not ours to read
            ppid[proc.pid] = info["ppid"] or 0
            cpu[(proc.pid, info["create_time"])] = info["cpu_times"].user + info["cpu_times"].system
        first = self._t0 is None
        for key, seconds in cpu.items():
            # a process keeps the role it had when first seen: one whose parent ends meanwhile
            # is reparented, and its time so far would move to another role
            known = self._last.get(key)
            role = known[0] if known is not None else self._role(key[0], ppid)
            # a process born between two looks used its CPU time within the window
            self._start.setdefault(key, seconds if first else 0.0)
            self._last[key] = (role, seconds)
        used = self.seconds_by_role()
        if self._t is not None and now > self._t:
            for role, seconds in used.items():
                self._peak[role] = max(self._peak[role], (seconds - self._previous.get(role, 0.0)) / (now - self._t))
        if self._machine is not None and total > self._machine[0]:
            self._busy.append(1.0 - (idle - self._machine[1]) / (total - self._machine[0]))
        self._previous, self._machine, self._t = used, (total, idle), now
        self._t0 = self._t0 if self._t0 is not None else now

    def _role(self, pid: int, ppid: dict[int, int]) -> str:
        name, hops, seen = self.roots.get(pid), 0, pid
        while name is None and seen in ppid and hops < 64:
            seen, hops = ppid[seen], hops + 1
            name = self.roots.get(seen)
        if name is None:
            return OTHER
        return name if hops == 0 else self.children.get(name, name)

    def seconds_by_role(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for key, (role, seconds) in self._last.items():
            out[role] += max(0.0, seconds - self._start[key])
        return dict(out)

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every period until ``stop``, and once more at the end."""
        while True:
            await asyncio.to_thread(self.sample)
            if stop.is_set():
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.period)

    def summary(self) -> dict[str, Any]:
        window = (self._t - self._t0) if self._t is not None and self._t0 is not None else 0.0
        used = self.seconds_by_role()
        busy = sorted(self._busy)
        return {
            "window_s": round(window, 1),
            "cores": psutil.cpu_count(),
            "period_s": self.period,
            "machine_busy_percent": {
                "mean": round(100 * sum(busy) / len(busy), 1) if busy else None,
                "max": round(100 * busy[-1], 1) if busy else None,
                "periods_over_90": sum(b > 0.9 for b in busy),
                "periods": len(busy),
            },
            "cpu_s_by_role": {role: round(s, 1) for role, s in sorted(used.items(), key=lambda kv: -kv[1])},
            "cores_by_role_mean": {role: round(s / window, 2) for role, s in used.items()} if window > 0 else {},
            "cores_by_role_peak": {role: round(c, 2) for role, c in sorted(self._peak.items())},
        }
