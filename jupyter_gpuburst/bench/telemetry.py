"""`gpuburst bench telemetry`: the server extension's GPU telemetry under load, as JSON.

Two parts, both on the production code path:

1. **cycle** (in this process): the sampler's whole cycle — kernel list, device read, process
   read (process trees from /proc), attribution and JSON encoding, up to publishing the sample —
   timed ``--samples`` times (default 1,000) with ``--gpus`` simulated GPUs (default 8) and
   ``--kernels`` kernel process trees (default 50). Every cycle re-reads processes (the worst
   case; in production one cycle in five does). GC stays on. With ``--backend nvml`` the cycle
   reads this host's real GPUs through NVML instead (the stand-in kernels hold no GPU there, so
   nothing is attributed to them and that check is left out).
2. **server** (a real jupyter_server in a child process, with the same GPUs and kernels), in
   three phases:
   A. no stream client;
   B. ``--clients`` stream clients (default 50) of this project's stream, and ``--churn``
      (default 10) of them per second disconnect while as many new ones connect;
   C. the floor: the same clients and churn on the least event stream jupyter_server can serve
      (``FloorStreamHandler`` in ``bench/telemetry_server.py``: its authentication, a first
      event, then one frame per period as long as a sample; no sampler, no authorization
      checks). C over A is what any stream's clients cost the server; B over C is what this
      project adds to that.
   The phases take turns in short blocks (``--block``, about 4 s): ``--rounds`` rounds (default
   3) of cycles A B C, their order rotated each cycle (A B C, B C A, C A B), until each phase
   has had ``--seconds`` (default 16) in the round. A block's clients connect before it (their
   first connections are reported on their own, as ``ramp_up_lag_ms``) and leave after it;
   after a B block the next waits for the sampler to pause. Short blocks, because a small
   machine's speed drifts over seconds: with no client at all, the status p99 of two 12 s
   windows there differed by up to a third.
   For the whole run, a process of its own (``bench/status_probe.py``) calls ``GET /api/status``
   ``--status-rate`` times per second (default 200) over one keep-alive connection; a call
   counts for the block it started in. In this process its responses would wait behind the
   stream clients' own work. A 1 ms timer inside the server records the event loop's lag in
   each block, and with each lag how long of it the loop's thread stood waiting for its CPU
   (Linux's scheduler statistics): ``cpu_wait_ms``, and ``lag_ms_less_cpu_wait``, the lag the
   loop's own work made; ``lag_max_split`` splits the largest lag so. The server runs on a CPU
   of its own, the clients and the probe on the others (``cpu_layout``; ``--no-pin`` turns that
   off), as browsers never take the server's CPU.
   Before the blocks: CPU use of the idle server with nobody listening and with one panel open.

The status ratios: per round (its median and spread) and pooled over the run (every call of
one phase against every call of another). ``status_p99_ratio_null`` sets A's odd cycles against
its even ones: what the run cannot tell from no difference. ``status_wire_ms`` times each call
to when its response reached the probe's socket (the kernel's receive timestamp), leaving out
the probe's own wait for a CPU.

Longer than 600 lines: a sixth of it is this account of what is measured and why, and the rest
is one benchmark whose two parts share the run's arguments, blocks and checks; the server's
own pieces live beside it (``telemetry_server``, ``telemetry_figures``, ``status_probe``).

What the slowest status calls overlapped (``slowest_status_overlapped``, per phase and round,
and pooled): the probe and the server share ``time.monotonic()``, so each of the slowest 2.5 %
of a phase's status calls (those behind its p99) is laid over the server's timeline of loop
steps, collections, sampler worker cycles and its loop thread's waits for its CPU, each of
50 µs or more, and the steps it overlapped are counted by name (the call's own steps left
out). A call that overlapped nothing was slowed outside all of that: the network, the probe,
or a stall of the machine's that the server's thread does not see as a wait.

Checks (each can fail): cycle p99 <= 5 ms; lag max <= 5 ms in every B block, and <= 10 ms in
every A block (else something else ran on the machine and the ratios mean nothing); /api/status
p99 ratio B/A (pooled) <= 1.1, and B/C likewise; A against A within 1/1.1 and 1.1 (else the run
cannot tell those ratios from no difference); at least 1,000 samples behind each tail; every
stream client connected for 3 periods or more received samples, about one per period (>= 0.8).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import aiohttp
import psutil

from jupyter_gpuburst.bench import stopping
from jupyter_gpuburst.bench.stats import summary
from jupyter_gpuburst.bench.telemetry_figures import (
    bootstrap_p99_ratio,
    calls_within,
    lag_max_split,
    lags_less_cpu_wait,
    merge_what_ran,
    p99_ratios,
    pooled_overlaps,
    pooled_p99_ratio,
    pooled_tail,
    slowest_status_overlapped,
)
from jupyter_gpuburst.hub.ports import free_port

CYCLE_P99_GOAL_MS = 5.0
LAG_MAX_GOAL_MS = 5.0
# the baseline's own lag beyond which the machine was busy with something else: a ratio over a
# disturbed baseline flatters the server, so the run fails instead
BASELINE_LAG_MAX_MS = 2 * LAG_MAX_GOAL_MS
STATUS_RATIO_GOAL = 1.1
MIN_TAIL_SAMPLES = 1000
PROBE_START_S = 2.0  # the probe process starts in well under this, even under load
PROBE_MAX_S = 6 * 3600  # the probe stops by itself after this, should the benchmark not stop it
RESET_LEAD_S = 0.2
SETTLE_S = 0.5  # after a block's clients connected: the server answers their first requests
STOP_MARGIN_S = 0.05
OUR_STREAM = "/api/gpuburst/stream"
FLOOR_STREAM = "/api/gpuburst-bench/floor-stream"  # bench/telemetry_server.py's FloorStreamHandler
# what the stream clients read in each phase: A none, B this project's stream, C the floor's
PHASES = {"A": None, "B": OUR_STREAM, "C": FLOOR_STREAM}
# how the JSON's pooled figures name each phase: lag_ms_without_clients, status_ms_floor, ...
PHASE_NAMES = {"A": "without_clients", "B": "with_clients", "C": "floor"}


# ---- part 1: the sampler's whole cycle -------------------------------------------------------
async def measure_cycle(gpus: int, kernels: int, samples: int, backend_name: str = "simulated") -> dict:
    from jupyter_gpuburst.bench.telemetry_server import standin_kernels, stop_standins
    from jupyter_gpuburst.gpu.nvml import NVMLBackend
    from jupyter_gpuburst.gpu.sampler import Sampler
    from jupyter_gpuburst.gpu.simulated import SimulatedBackend

    backend = NVMLBackend() if backend_name == "nvml" else SimulatedBackend(gpus)

    procs, refs = standin_kernels(kernels)
    try:

        async def kernel_source():
            return refs

        # a process period of 1 µs: every cycle re-reads processes and process trees
        sampler = Sampler(backend=backend, kernel_source=kernel_source, period_s=1e-6, process_period_s=1e-6)
        try:
            await sampler._sample_once()  # opens the backend; not a steady-state cycle
            if sampler._latest is not None and sampler._latest.data.get("reason"):
                raise SystemExit(f"gpuburst bench telemetry: {backend_name}: {sampler._latest.data['reason']}")
            sampler.stats.cycle_s.clear()
            sampler.stats.cycle_with_processes_s.clear()
            for _ in range(samples):
                await sampler._sample_once()
                await asyncio.sleep(0)
            # the compute alone, on this thread: what the cycle costs without the thread hand-off
            compute = []
            for _ in range(samples):
                t0 = time.perf_counter()
                sampler._take_encoded(refs, time.time())
                compute.append(time.perf_counter() - t0)
            last = sampler._latest
            attributed = sum(1 for k in last.data["kernels"] if k["gpus"]) if last else 0
            return {
                "backend": backend.name,
                "gpus": len(last.data["gpus"]) if last else 0,
                "kernels": kernels,
                "kernels_attributed": attributed,
                "sample_bytes": len(last.encoded) if last else 0,
                "cycle_ms": summary(sampler.stats.cycle_s, scale=1000),
                "cycle_with_processes_ms": summary(sampler.stats.cycle_with_processes_s, scale=1000),
                "compute_only_ms": summary(compute, scale=1000),
                "process_read_ms": summary(sampler.stats.process_read_s, scale=1000),
                "device_read_ms": summary(sampler.stats.device_read_s, scale=1000),
            }
        finally:
            await sampler.close()
    finally:
        stop_standins(procs)


# ---- part 2: the server under stream clients -------------------------------------------------
class Server:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.token = token
        self.headers = {"Authorization": f"token {token}"}

    async def stats(
        self, session: aiohttp.ClientSession, reset: bool = False, probe: str | None = None, timeline: bool = False, raw: bool = False
    ) -> dict:
        params = {}
        if reset:
            params["reset"] = "1"
        if probe:
            params["probe"] = probe
        if timeline:
            params["timeline"] = "1"
        if raw:
            params["raw"] = "1"
        async with session.get(f"{self.base}/api/gpuburst-bench/stats", headers=self.headers, params=params) as r:
            r.raise_for_status()
            return await r.json()

    async def sampler_paused(self, session: aiohttp.ClientSession, timeout: float = 60) -> None:
        """Until the last listener's lease has run out and the sampler stopped."""
        deadline = time.monotonic() + timeout
        while (await self.stats(session))["sampler_running"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the sampler did not pause after its listeners left")
            await asyncio.sleep(0.1)

    async def wait_ready(self, session: aiohttp.ClientSession, proc: subprocess.Popen, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{self.base}/api/status", headers=self.headers) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise RuntimeError("the server did not become ready in time")


class StreamClient:
    """One open panel: reads the event stream until told to leave."""

    def __init__(self, server: Server, session: aiohttp.ClientSession, path: str = OUR_STREAM) -> None:
        self.server, self.session, self.path = server, session, path
        self.samples = 0
        self.connected_at: float | None = None
        self.left_at: float | None = None
        self.connected = asyncio.Event()
        self.leave = asyncio.Event()
        self.error: str | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            async with self.session.get(
                f"{self.server.base}{self.path}", headers=self.server.headers, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
            ) as r:
                r.raise_for_status()
                reader = asyncio.ensure_future(self._read(r))
                await self.leave.wait()
                self.left_at = time.monotonic()
                reader.cancel()
        except Exception as exc:  # noqa: BLE001 - reported in the JSON
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.connected.set()

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        async for line in response.content:
            if line.startswith(b"event: placement"):
                self.connected_at = time.monotonic()
                self.connected.set()
            elif line.startswith(b"event: sample"):
                self.samples += 1

    async def close(self) -> None:
        self.leave.set()
        await self.task


class StatusProbe:
    """The process that calls ``GET /api/status`` ``rate`` times per second for the whole run
    (``bench/status_probe.py``), on ``cpus``."""

    def __init__(self, server: Server, rate: float, cpus: set[int] | None) -> None:
        self.server, self.rate, self.cpus = server, rate, cpus
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        config = json.dumps(
            {
                "url": f"{self.server.base}/api/status",
                "token": self.server.token,
                "rate": self.rate,
                "until": time.monotonic() + PROBE_MAX_S,
            }
        )
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jupyter_gpuburst.bench.status_probe", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        if self.cpus:
            os.sched_setaffinity(self.proc.pid, self.cpus)
        self.proc.stdin.write(config.encode())
        await self.proc.stdin.drain()
        self.proc.stdin.close()
        await asyncio.sleep(PROBE_START_S)

    async def stop(self) -> list[tuple[float, float, float | None]]:
        """Every call it made: ``(started, seconds, wire_seconds)``."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        out = await self.proc.stdout.read()
        await self.proc.wait()
        if self.proc.returncode != 0:
            raise RuntimeError(f"the status probe exited with {self.proc.returncode}")
        return [(started, seconds, wire) for started, seconds, wire in json.loads(out)]

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


async def churn(
    server: Server,
    session: aiohttp.ClientSession,
    path: str,
    clients: list[StreamClient],
    per_second: float,
    until: float,
    closed: list[StreamClient],
) -> int:
    """Every 1/per_second s: the oldest client leaves and a new one connects. Returns the swaps."""
    swaps = 0
    if per_second <= 0:
        return 0
    interval = 1.0 / per_second
    nxt = time.monotonic() + interval
    while True:
        await asyncio.sleep(max(0.0, nxt - time.monotonic()))
        if time.monotonic() >= until:
            return swaps
        nxt += interval
        old = clients.pop(0)
        old.leave.set()
        closed.append(old)
        clients.append(StreamClient(server, session, path))
        swaps += 1


async def cpu_percent(proc: psutil.Process, seconds: float) -> float:
    before = proc.cpu_times()
    await asyncio.sleep(seconds)
    after = proc.cpu_times()
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / seconds


def cpu_layout(pin: bool) -> dict[str, list[int]] | None:
    """The CPUs the server, the status probe and the stream clients run on: apart, so that the
    load generator never takes the server's CPU (browsers run on other machines). With two CPUs
    the probe shares the clients' one; with one, nothing is pinned."""
    if not pin or not hasattr(os, "sched_getaffinity"):  # CPU affinity is a Linux call
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    if len(cpus) == 2:
        return {"server": cpus[1:], "status_probe": cpus[:1], "clients": cpus[:1]}
    return {"server": cpus[-1:], "status_probe": cpus[-2:-1], "clients": cpus[:-2]}


async def measure_server(args: argparse.Namespace) -> dict:
    port, token = free_port(), secrets.token_hex(16)
    root = tempfile.mkdtemp(prefix="gpuburst-bench-telemetry-")
    options = {
        "port": port,
        "token": token,
        "root_dir": root,
        "backend": args.backend,
        "period_s": args.period,
        "gpus": args.gpus,
        "kernels": args.kernels,
    }
    env = {**os.environ, "JUPYTER_CONFIG_DIR": os.path.join(root, ".jupyter"), "JUPYTER_RUNTIME_DIR": os.path.join(root, ".runtime")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.bench.telemetry_server", json.dumps(options)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=root,
    )
    server_ps = psutil.Process(proc.pid)
    server = Server(f"http://127.0.0.1:{port}", token)
    layout = cpu_layout(args.pin)
    own_cpus = os.sched_getaffinity(0) if layout else None
    cycles = cycles_per_round(args.seconds, args.block)
    out: dict = {
        "clients": args.clients,
        "churn_per_s": args.churn,
        "seconds_per_phase_and_round": args.seconds,
        "rounds": args.rounds,
        "cycles_per_round": cycles,
        "block_s": round(args.seconds / cycles, 3),
        "status_rate_per_s": args.status_rate,
        "period_s": args.period,
        "cpu_layout": layout,
    }
    probe = StatusProbe(server, args.status_rate, set(layout["status_probe"]) if layout else None)
    try:
        if layout:
            # before the server starts a thread of its own: every thread it starts inherits this
            os.sched_setaffinity(proc.pid, layout["server"])
            os.sched_setaffinity(0, layout["clients"])
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await server.wait_ready(session, proc)
            async with session.get(f"{server.base}/api/gpuburst/gpus", headers=server.headers) as r:
                first = await r.json()
            out["backend"] = first["backend"]
            out["gpus"] = len(first["gpus"])
            out["kernels"] = len(first["kernels"])
            await asyncio.sleep(args.period * 4)  # the request's lease runs out: the sampler pauses

            # idle CPU: nobody listening, then one open panel (the probe is off for both)
            out["cpu_idle_no_listener_percent"] = round(await cpu_percent(server_ps, args.cpu_seconds), 3)
            one = StreamClient(server, session)
            await one.connected.wait()
            out["cpu_one_listener_percent"] = round(await cpu_percent(server_ps, args.cpu_seconds), 3)
            await one.close()
            out["cpu_resolution_percent"] = round(100.0 / os.sysconf("SC_CLK_TCK") / args.cpu_seconds, 3)

            await probe.start()
            blocks = []
            previous = "B"  # the open panel just closed: as after a B block, the sampler must pause first
            for index in range(args.rounds * cycles):
                for phase in phase_order(index):
                    if previous == "B" and phase != "B":
                        await server.sampler_paused(session)
                    blocks.append(await block(server, session, args, phase, index, cycles, proc=server_ps))
                    previous = phase
            calls = await probe.stop()
    finally:
        probe.kill()
        if own_cpus:
            os.sched_setaffinity(0, own_cpus)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _kill_standins(root)
        shutil.rmtree(root, ignore_errors=True)

    for b in blocks:
        b["calls"] = calls_within(calls, b["t0"], b["t1"])
    rounds = [
        {phase: merge_blocks([b for b in blocks if b["round"] == index and b["phase"] == phase], args) for phase in PHASES}
        for index in range(args.rounds)
    ]
    for index, r in enumerate(rounds):
        r["order"] = " ".join("".join(phase_order(index * cycles + cycle)) for cycle in range(cycles))
    # each phase's call times, cycle by cycle: the bootstrap draws whole cycles
    by_cycle = {
        phase: [
            [c[1] for b in blocks if b["phase"] == phase and b["cycle"] == cycle for c in b["calls"]]
            for cycle in range(args.rounds * cycles)
        ]
        for phase in PHASES
    }
    seen = {phase: [v for calls in by_cycle[phase] for v in calls] for phase in PHASES}
    wire = {phase: [c[2] for b in blocks if b["phase"] == phase for c in b["calls"] if c[2] is not None] for phase in PHASES}
    out["rounds_detail"] = rounds
    for phase, name in PHASE_NAMES.items():
        for key in ("lag_ms", "lag_ms_less_cpu_wait", "cpu_wait_ms"):
            out[f"{key}_{name}"] = pooled_tail(rounds, phase, key)
        # the run's largest lag in the phase, split: what set the lag maximum the check reads
        splits = [r[phase]["lag_max_split"] for r in rounds if r[phase]["lag_max_split"]]
        out[f"lag_max_split_{name}"] = max(splits, key=lambda split: split["lag_ms"], default=None)
        out[f"status_ms_{name}"] = summary(seen[phase], scale=1000)
        out[f"status_wire_ms_{name}"] = summary(wire[phase], scale=1000)
        out[f"slowest_status_overlapped_{name}"] = pooled_overlaps([r[phase]["slowest_status_overlapped"] for r in rounds])
    out["ramp_up_lag_ms_max"] = max(r["B"]["ramp_up_lag_ms"]["max"] or 0 for r in rounds)
    out["status_p99_ratio"] = {
        **p99_ratios(rounds, "B", "A"),
        "pooled": pooled_p99_ratio(seen["B"], seen["A"]),
        "interval_90": bootstrap_p99_ratio(by_cycle["B"], by_cycle["A"]),
        "goal": STATUS_RATIO_GOAL,
    }
    out["status_p99_ratio_floor"] = {
        **p99_ratios(rounds, "C", "A"),
        "pooled": pooled_p99_ratio(seen["C"], seen["A"]),
        "interval_90": bootstrap_p99_ratio(by_cycle["C"], by_cycle["A"]),
    }
    out["status_p99_ratio_over_floor"] = {
        **p99_ratios(rounds, "B", "C"),
        "pooled": pooled_p99_ratio(seen["B"], seen["C"]),
        "interval_90": bootstrap_p99_ratio(by_cycle["B"], by_cycle["C"]),
        "goal": STATUS_RATIO_GOAL,
    }
    out["status_wire_p99_ratio"] = {**p99_ratios(rounds, "B", "A", "status_wire_ms"), "pooled": pooled_p99_ratio(wire["B"], wire["A"])}
    # A against A: its odd cycles' calls over its even cycles', the least difference this run can tell
    halves = [[v for calls in by_cycle["A"][parity::2] for v in calls] for parity in (1, 0)]
    out["status_p99_ratio_null"] = {"pooled": pooled_p99_ratio(*halves), "n": [len(h) for h in halves]}
    streamed = [r[phase] for r in rounds for phase in ("B", "C")]
    out["stream_errors"] = sum(w["stream_errors"] for w in streamed)
    out["samples_per_connected_period_min"] = min((w["samples_per_connected_period"] or 0.0 for w in streamed), default=0.0)
    out["clients_without_samples"] = sum(w["clients_without_samples"] for w in streamed)
    return out


def cycles_per_round(seconds: float, block: float) -> int:
    """How many blocks of about ``block`` s make up a phase's ``seconds`` in one round."""
    return max(1, round(seconds / block))


def phase_order(index: int) -> list[str]:
    """Cycle ``index``'s order of the phases: rotated each cycle (A B C, B C A, C A B, ...), so
    that over every three cycles each phase runs first, second and third once, and whatever
    drifts during a run is shared alike."""
    phases = list(PHASES)
    shift = index % len(phases)
    return phases[shift:] + phases[:shift]


async def block(
    server: Server,
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    phase: str,
    cycle: int,
    cycles: int,
    proc: psutil.Process | None = None,
) -> dict:
    """One block of ``phase`` in the run's ``cycle``-th cycle (``cycles`` a round): its clients
    connect (the ramp, reported apart), then the block's measured ``args.seconds / cycles``
    seconds with churn; the lag probe runs for it."""
    stream = PHASES[phase]
    await server.stats(session, reset=True, probe="start")
    streams = [StreamClient(server, session, stream) for _ in range(args.clients if stream else 0)]
    await asyncio.gather(*(c.connected.wait() for c in streams))
    await asyncio.sleep(SETTLE_S)
    t0 = time.monotonic() + RESET_LEAD_S
    # the reset just before the block: its own step (a millisecond or more) must not hold the
    # first status calls
    ramp = await server.stats(session, reset=True, raw=True)  # the first connections, reported apart
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    cpu_before, cpu_from = (proc.cpu_times() if proc is not None else None), time.monotonic()
    t1 = t0 + args.seconds / cycles
    closed: list[StreamClient] = []
    swaps = await churn(server, session, stream, streams, args.churn, t1, closed) if stream else 0
    # a call that started in the block has ended before the block's figures are read
    await asyncio.sleep(max(0.0, t1 + STOP_MARGIN_S - time.monotonic()))
    stats = await server.stats(session, probe="stop", timeline=True, raw=True)
    cpu_after, cpu_wall_s = (proc.cpu_times() if proc is not None else None), time.monotonic() - cpu_from
    await asyncio.gather(*(c.close() for c in streams + closed))
    everyone = streams + closed
    return {
        "phase": phase,
        "round": cycle // cycles,
        "cycle": cycle,
        "t0": t0,
        "t1": t1,
        "clients": len(streams),
        "swaps": swaps,
        "samples": stats["samples"] - ramp["samples"],
        "stats": stats,
        "ramp": ramp,
        "everyone": everyone,
        "cpu_s": ((cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)) if cpu_before and cpu_after else None,
        "cpu_wall_s": cpu_wall_s,
    }


def merge_blocks(blocks: list[dict], args: argparse.Namespace) -> dict:
    """One phase of one round: its blocks' figures together."""
    calls = [c for b in blocks for c in b["calls"]]
    seen = [c[1] for c in calls]
    lags = [v for b in blocks for v in b["stats"]["lags_s"]]
    # a block whose server reported no waits (not Linux) leaves its lags without a pair
    waits = [v for b in blocks for v in b["stats"].get("cpu_waits_s", [])]
    wire = [c[2] for c in calls if c[2] is not None]
    timeline = [t for b in blocks for t in b["stats"]["timeline"]]
    everyone = [c for b in blocks for c in b["everyone"]]
    cpu = [b["cpu_s"] for b in blocks]
    cpu_wall_s = sum(b["cpu_wall_s"] for b in blocks)
    # one sample per period connected, give or take the one at each end of a client's stay
    connected_s = sum((c.left_at - c.connected_at) for c in everyone if c.connected_at and c.left_at)
    received = sum(c.samples for c in everyone)
    starved = sum(1 for c in everyone if c.connected_at and c.left_at and c.left_at - c.connected_at >= 3 * args.period and c.samples == 0)
    return {
        "blocks": len(blocks),
        "clients": max((b["clients"] for b in blocks), default=0),
        "swaps": sum(b["swaps"] for b in blocks),
        "samples": sum(b["samples"] for b in blocks),
        "lag_ms": summary(lags, scale=1000),
        # how long the loop's thread stood runnable but off its CPU, per 1 ms tick, and the lag
        # without it: the OS's share of a lag against the loop's own work
        "cpu_wait_ms": summary(waits, scale=1000),
        "lag_ms_less_cpu_wait": summary(lags_less_cpu_wait(lags, waits), scale=1000),
        "lag_max_split": lag_max_split(lags, waits),
        # the server's CPU use over the blocks (both threads), in % of one core
        "server_cpu_percent": round(100 * sum(cpu) / cpu_wall_s, 1) if cpu_wall_s and None not in cpu else None,
        # what the loop ran when it lagged: callbacks over 2 ms, and the collector's pauses
        "what_ran": merge_what_ran([b["stats"]["what_ran"] for b in blocks]),
        "ramp_up_lag_ms": summary([v for b in blocks for v in b["ramp"]["lags_s"]], scale=1000),
        "ramp_up_what_ran": merge_what_ran([b["ramp"]["what_ran"] for b in blocks]),
        "cycle_ms": summary([v for b in blocks for v in b["stats"]["cycle_s"]], scale=1000),
        "status_ms": summary(seen, scale=1000),
        "status_wire_ms": summary(wire, scale=1000),
        "slowest_status_overlapped": slowest_status_overlapped([c[:2] for c in calls], timeline),
        # each block's status p99 and lag max (ms), in the order they ran: how far a run drifts
        "per_block": [
            [b["cycle"], summary([c[1] for c in b["calls"]], scale=1000)["p99"], summary(b["stats"]["lags_s"], scale=1000)["max"]]
            for b in blocks
        ],
        "stream_errors": sum(1 for c in everyone if c.error),
        "samples_per_connected_period": round(received * args.period / connected_s, 3) if everyone and connected_s else None,
        "clients_without_samples": starved,
    }


def _kill_standins(root: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(root, "standin-pids.json")) as f:
            for pid in json.load(f):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


# ---- checks and the command ----------------------------------------------------------------
def checks(result: dict) -> dict[str, bool]:
    """Pass/fail over the run's JSON; each is False when its condition is violated."""
    cycle = result["cycle"]["cycle_ms"]
    server = result.get("server")
    out = {
        "cycle_samples_enough": cycle["n"] >= MIN_TAIL_SAMPLES,
        "cycle_p99_within_goal": cycle["p99"] is not None and cycle["p99"] <= CYCLE_P99_GOAL_MS,
    }
    if result["cycle"].get("backend", "simulated") == "simulated":
        out["all_kernels_attributed"] = result["cycle"]["kernels_attributed"] == result["cycle"]["kernels"]
    if server is not None:
        lag = server["lag_ms_with_clients"]
        baseline = server["lag_ms_without_clients"]
        ratio = server["status_p99_ratio"]["pooled"]
        over_floor = server["status_p99_ratio_over_floor"]["pooled"]
        null = server["status_p99_ratio_null"]["pooled"]
        out.update(
            {
                "lag_samples_enough": lag["n"] >= MIN_TAIL_SAMPLES,
                "lag_max_within_goal": lag["max"] is not None and lag["max"] <= LAG_MAX_GOAL_MS,
                "baseline_undisturbed": baseline["max"] is not None and baseline["max"] <= BASELINE_LAG_MAX_MS,
                "status_samples_enough": min(
                    server["status_ms_with_clients"]["n"], server["status_ms_without_clients"]["n"], server["status_ms_floor"]["n"]
                )
                >= MIN_TAIL_SAMPLES,
                "status_p99_ratio_within_goal": ratio is not None and ratio <= STATUS_RATIO_GOAL,
                # A against A: a run whose baseline differs from itself by more than the goal's margin
                # cannot tell a ratio within the goal from one beyond it, whichever way it came out
                "status_baseline_repeatable": null is not None and 1 / STATUS_RATIO_GOAL <= null <= STATUS_RATIO_GOAL,
                # the same clients on the least stream jupyter_server can serve: what this project adds
                "status_p99_within_goal_of_floor": over_floor is not None and over_floor <= STATUS_RATIO_GOAL,
                "streams_without_errors": server["stream_errors"] == 0,
                "every_client_got_samples": server["clients_without_samples"] == 0 and server["samples_per_connected_period_min"] >= 0.8,
            }
        )
    return out


async def run(args: argparse.Namespace) -> dict:
    result: dict = {"benchmark": "telemetry", "gc_enabled": True}
    result["cycle"] = await measure_cycle(args.gpus, args.kernels, args.samples, args.backend)
    if not args.cycle_only:
        result["server"] = await measure_server(args)
    result["cpu_count"] = os.cpu_count()
    result["load_average"] = [round(v, 2) for v in os.getloadavg()]
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuburst bench telemetry", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        choices=["simulated", "nvml"],
        default="simulated",
        help="GPU backend of both parts (default simulated; nvml reads this host's GPUs)",
    )
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    parser.add_argument("--kernels", type=int, default=50, help="kernel process trees (default 50)")
    parser.add_argument("--samples", type=int, default=1000, help="timed sampler cycles (default 1000)")
    parser.add_argument("--clients", type=int, default=50, help="stream clients in the B and C phases (default 50)")
    parser.add_argument("--churn", type=float, default=10.0, help="clients replaced per second in B and C (default 10)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of cycles of A, B and C blocks, in an order rotated each cycle (default 3)"
    )
    parser.add_argument("--seconds", type=float, default=16.0, help="measured seconds of each phase in each round (default 16)")
    parser.add_argument("--block", type=float, default=4.0, help="about how long each block lasts (default 4; --seconds is split evenly)")
    parser.add_argument("--status-rate", type=float, default=200.0, help="GET /api/status per second (default 200)")
    parser.add_argument("--cpu-seconds", type=float, default=5.0, help="length of each idle-CPU phase (default 5)")
    parser.add_argument("--period", type=float, default=1.0, help="sampling period in seconds (default 1.0)")
    parser.add_argument("--cycle-only", action="store_true", help="time the sampler's cycle only, no server")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="do not pin the server, the status probe and the stream clients to separate CPUs"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if min(args.gpus, args.samples, args.clients, args.rounds) < 1 or args.kernels < 0:
        parser.error("--gpus, --samples, --clients and --rounds must be >= 1; --kernels >= 0")
    if not 1 <= args.gpus <= 16:
        parser.error("--gpus must be 1-16 (the simulated backend's range)")
    if min(args.seconds, args.block, args.period, args.status_rate, args.cpu_seconds) <= 0 or args.churn < 0:
        parser.error("--seconds, --block, --period, --status-rate and --cpu-seconds must be positive; --churn >= 0")
    result = stopping.run(run(args))
    print(json.dumps(result, indent=None if args.json else 2))
    return 0 if result["ok"] else 1
