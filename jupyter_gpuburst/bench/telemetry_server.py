"""The server under test for `gpuburst bench telemetry`: a real jupyter_server with the extension.

Adds, for the benchmark only:
- an event-loop lag probe: a 1 ms timer that records how late each tick fires (the time the loop
  spent on something else) and, where Linux tells it, how long of that tick the loop's thread
  waited for its CPU; started and stopped through the stats endpoint;
- ``GET /api/gpuburst-bench/stats`` (token-authenticated like any API): sampler timings and the
  probe's quantiles, ``?reset=1`` clears them, ``?probe=start|stop``, ``?timeline=1`` adds what
  held the loop since the last reset (see ``WhatRan``), ``?raw=1`` every lag, CPU wait and sampler
  cycle since then (so that the benchmark can pool its blocks);
- ``GET /api/gpuburst-bench/floor-stream``: the least an event stream on jupyter_server does
  (``FloorStreamHandler``), for the benchmark's like-for-like baseline of the same clients;
- ``--kernels N``: N stand-in kernel processes (``sh`` with a ``sleep`` child, so each has a
  process tree) appended to the real kernel manager's list. The sampler resolves, attributes and
  encodes them exactly as it does real kernels; 50 real ipykernels (about 80 MB each) do not fit
  next to the benchmark on a small machine.

Run as `python -m jupyter_gpuburst.bench.telemetry_server CONFIG_JSON`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

from jupyter_server.base.handlers import APIHandler
from jupyter_server.serverapp import ServerApp
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError
from traitlets.config import Config

from jupyter_gpuburst.bench.stats import summary
from jupyter_gpuburst.gpu.backend import KernelRef
from jupyter_gpuburst.gpu.sampler import Sampler
from jupyter_gpuburst.sim.lifeline import on_parent_exit

PROBE_INTERVAL_S = 0.001
# the timeline keeps steps at least this long: shorter ones cannot move a millisecond-scale call
TIMELINE_MIN_S = 50e-6
SAMPLER_WORKER = "sampler worker cycle (its own thread, holding the GIL while it computes)"
CPU_WAIT = "the loop's thread waiting for its CPU (something else ran there)"
STATUS_CONNECTION = "the status calls' connection"
OTHER_CONNECTION = "another connection"


def open_run_delay() -> int | None:
    """The calling thread's scheduler statistics, opened for ``run_delay``; None where the
    kernel keeps none (not Linux, or built without them)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return None
    try:
        run_delay(fd)
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return None
    return fd


def run_delay(fd: int) -> float:
    """Seconds the thread has stood runnable but waiting for a CPU, since it began (the second
    field of its ``schedstat``); a read costs about a microsecond."""
    return int(os.pread(fd, 64, 0).split()[1]) / 1e9


class LagProbe:
    """A 1 ms timer; each tick records how late it fired: the loop's lag at that moment.

    With each lag, where Linux tells it, how long the loop's thread waited for its CPU during
    that tick (``waits``): the part of the lag the OS caused by running something else there
    (another process, a kernel thread, the server's own sampler thread), not the loop's work.
    Each wait also goes on ``what_ran``'s timeline, at the end of its tick: a thread woken by its
    timer waits from then until it runs.
    """

    def __init__(self, what_ran: WhatRan | None = None) -> None:
        self.lags: list[float] = []
        self.waits: list[float] = []
        self.what_ran = what_ran
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self.run())

    def stop(self) -> None:
        # the probe wakes 1000 times a second: it must be off while CPU use is measured
        if self.task is not None:
            self.task.cancel()
            self.task = None

    def clear(self) -> None:
        self.lags.clear()
        self.waits.clear()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        fd = open_run_delay()  # here, on the loop's thread: the file is that thread's
        try:
            waited = run_delay(fd) if fd is not None else 0.0
            while True:
                start = loop.time()
                await asyncio.sleep(PROBE_INTERVAL_S)
                woke = loop.time()  # asyncio's clock is time.monotonic(), the timeline's
                lag = max(0.0, woke - start - PROBE_INTERVAL_S)
                # both lists grow in the same step, so that the n-th wait is the n-th lag's
                self.lags.append(lag)
                if fd is not None:
                    now = run_delay(fd)
                    self.waits.append(now - waited)
                    if self.what_ran is not None:
                        self.what_ran.note_cpu_wait(woke, now - waited)
                    waited = now
        finally:
            if fd is not None:
                os.close(fd)


class WhatRan:
    """What held the event loop when it lagged: every callback the loop ran for longer than
    ``threshold_s`` (its repr: the coroutine or function), and every garbage collection pause.

    Also a timeline, on ``time.monotonic()`` (one clock for every process on Linux, so the
    status probe's calls can be laid over it): every callback and collection of 50 µs or more,
    the sampler worker's cycles (``note_worker``), which hold the GIL the loop needs, and the
    loop's thread's waits for its CPU of 50 µs or more (``note_cpu_wait``). A
    connection's own steps (tornado's I/O dispatch and request parsing) are named by whose they
    are: the connection of the latest ``/api/status`` call (the probe's one keep-alive
    connection), or another.

    Installed in the benchmark's server only: ``asyncio.Handle._run`` is wrapped to time each
    callback (two clock reads per callback), and ``gc.callbacks`` times each collection.
    """

    def __init__(self, threshold_s: float = 0.002, keep: int = 25) -> None:
        self.threshold_s = threshold_s
        self.keep = keep
        self.slow: list[tuple[float, str]] = []
        self.gc: list[tuple[int, float]] = []
        self.timeline: list[tuple[float, float, str]] = []
        self.status_fd: int | None = None
        self._gc_started = 0.0
        self._original = None

    def install(self) -> None:
        import gc
        from asyncio import events

        original = events.Handle._run
        recorder = self

        def _run(handle: events.Handle) -> None:
            what = recorder._what(handle)  # before it runs: a finished coroutine has no frame
            started = time.perf_counter()
            original(handle)
            took = time.perf_counter() - started
            if took >= TIMELINE_MIN_S:
                recorder.timeline.append((time.monotonic() - took, took, recorder._name(what)))
            if took >= recorder.threshold_s:
                recorder._note(took, what)

        self._original = original
        events.Handle._run = _run  # type: ignore[method-assign]
        gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        import gc
        from asyncio import events

        if self._original is not None:
            events.Handle._run = self._original  # type: ignore[method-assign]
            self._original = None
            gc.callbacks.remove(self._on_gc)

    @staticmethod
    def _fd(owner: object) -> int | None:
        """The socket a request handler or an HTTP connection serves."""
        connection = getattr(getattr(owner, "request", None), "connection", None) or owner
        sock = getattr(getattr(connection, "stream", None), "socket", None)
        return sock.fileno() if sock is not None else None

    def _what(self, handle: object) -> object:
        """The coroutine a task step resumes, with the request handler it serves; else the callback.

        For a tornado request handler, which step of its request this is: the ``first`` (before
        its headers are written: authentication, the handler up to its first flush: a stream
        connect), the ``last`` (the request finishes in it: a stream's end), or one between (a
        stream's sample)."""
        callback = getattr(handle, "_callback", None)
        get_coro = getattr(getattr(callback, "__self__", None), "get_coro", None)
        if get_coro is None:
            if getattr(callback, "__name__", "") == "_handle_events":  # tornado's I/O dispatch: (fd, events)
                return ("io", callback, getattr(handle, "_args", (None,))[0])
            return callback
        coro = get_coro()
        frame = getattr(coro, "cr_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        if owner is None:
            return ("step", coro, None, "")
        if type(owner).__name__ == "APIStatusHandler":
            self.status_fd = self._fd(owner)
        first = getattr(owner, "_headers_written", True) is False
        return ("step", coro, owner, "first" if first else "")

    def _name(self, what: object) -> str:
        """Called after the step ran (a handler's ``last`` step is known only then)."""
        if isinstance(what, tuple) and what[0] == "io":
            _, callback, fd = what
            return f"{callback.__qualname__} ({self._whose(fd)})"
        if isinstance(what, tuple):
            _, coro, owner, step = what
            name = getattr(coro, "__qualname__", repr(coro))
            if owner is None:
                return name
            kind = type(owner).__name__
            if kind == "HTTP1ServerConnection":
                return f"{name} ({self._whose(self._fd(owner))})"
            if not step and getattr(owner, "_finished", False) is True:
                step = "last"
            return f"{name} ({kind}{', ' + step + ' step' if step else ''})"
        return (getattr(what, "__qualname__", None) or repr(what))[:160]

    def _whose(self, fd: int | None) -> str:
        return STATUS_CONNECTION if fd is not None and fd == self.status_fd else OTHER_CONNECTION

    def _note(self, took: float, what: object) -> None:
        self.slow.append((took, self._name(what)[:160]))
        if len(self.slow) > 4 * self.keep:
            self.slow = sorted(self.slow, reverse=True)[: self.keep]

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            took = time.perf_counter() - self._gc_started
            self.gc.append((info["generation"], took))
            if took >= TIMELINE_MIN_S:
                self.timeline.append((time.monotonic() - took, took, f"collection of generation {info['generation']}"))

    def note_worker(self, started: float, took: float) -> None:
        """A sampler cycle in its worker thread (``time.monotonic()`` start, seconds)."""
        self.timeline.append((started, took, SAMPLER_WORKER))

    def note_cpu_wait(self, ended: float, waited: float) -> None:
        """The loop's thread stood ``waited`` seconds runnable, off its CPU, until ``ended``."""
        if waited >= TIMELINE_MIN_S:
            self.timeline.append((ended - waited, waited, CPU_WAIT))

    def report(self) -> dict:
        slow = sorted(self.slow, reverse=True)[: self.keep]
        by_generation = {}
        for generation, took in self.gc:
            entry = by_generation.setdefault(str(generation), {"n": 0, "max_ms": 0.0, "total_ms": 0.0})
            entry["n"] += 1
            entry["max_ms"] = round(max(entry["max_ms"], took * 1000), 3)
            entry["total_ms"] = round(entry["total_ms"] + took * 1000, 3)
        return {"slow_callbacks": [{"ms": round(t * 1000, 2), "what": w} for t, w in slow], "gc": by_generation}

    def reset(self) -> None:
        self.slow.clear()
        self.gc.clear()
        self.timeline.clear()


def standin_kernels(count: int) -> tuple[list[subprocess.Popen], list[KernelRef]]:
    """``count`` process trees that stand for kernels; every other one reports itself busy.

    Each reads its stdin, a pipe only this process writes to, and ends with its child when that
    closes: however this process ends (a test's timeout sends SIGKILL), none outlives it."""
    procs = [
        subprocess.Popen(["sh", "-c", "sleep 86400 & read -r _; kill $!"], stdin=subprocess.PIPE, start_new_session=True)
        for _ in range(count)
    ]
    refs = [
        KernelRef(
            kernel_id=f"bench-kernel-{i:03d}",
            name="python3",
            notebook=f"bench/notebook-{i:03d}.ipynb",
            pid=p.pid,
            execution_state="busy" if i % 2 else "idle",
        )
        for i, p in enumerate(procs)
    ]
    return procs, refs


def stop_standins(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        p.stdin.close()


class FloorTicker:
    """Once a period, one frame for every floor stream: as long as the sampler's last one.

    Started by the first floor stream. The frame's length follows the sampler's latest sample,
    so that a floor client reads as many bytes as one of this project's stream clients."""

    def __init__(self, sampler: Sampler, period_s: float) -> None:
        self.sampler = sampler
        self.period_s = period_s
        self.frame = b""
        self._size = -1
        self.tick: asyncio.Future | None = None
        self._task: asyncio.Task | None = None

    def ensure_running(self) -> None:
        if self._task is None:
            self.tick = asyncio.get_running_loop().create_future()
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.period_s)
            latest = self.sampler._latest
            size = len(latest.encoded) if latest is not None else 0
            if size != self._size:
                self.frame, self._size = b"event: sample\ndata: " + b"0" * size + b"\n\n", size
            tick, self.tick = self.tick, loop.create_future()
            tick.set_result(None)


class FloorStreamHandler(APIHandler):
    """The least an event stream on jupyter_server does, to measure the clients' cost to the
    server without this project: the same authentication and headers, a first event flushed at
    connect, then one shared frame per period. No sampler, no authorization checks, no
    placement: whatever this project's stream costs beyond this handler is its own."""

    _gone = False

    def on_connection_close(self) -> None:
        self._gone = True

    @web.authenticated
    async def get(self) -> None:
        ticker: FloorTicker = self.settings["bench_floor_ticker"]
        ticker.ensure_running()
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache, no-store")
        self.set_header("X-Accel-Buffering", "no")
        try:
            self.write(b"event: placement\ndata: {}\n\n")
            await self.flush()
            while not self._gone:
                await ticker.tick
                self.write(ticker.frame)
                await self.flush()
        except StreamClosedError:
            pass


class StatsHandler(APIHandler):
    _track_activity = False

    @web.authenticated
    def get(self) -> None:
        probe: LagProbe = self.settings["bench_probe"]
        sampler: Sampler = self.settings["gpuburst_sampler"]
        stats = sampler.stats
        body = {
            "samples": stats.samples,
            "process_samples": stats.process_samples,
            "cycle_ms": summary(stats.cycle_s, scale=1000),
            "cycle_with_processes_ms": summary(stats.cycle_with_processes_s, scale=1000),
            "device_read_ms": summary(stats.device_read_s, scale=1000),
            "process_read_ms": summary(stats.process_read_s, scale=1000),
            "loop_work_ms": summary(stats.loop_work_s, scale=1000),
            "lag_ms": summary(probe.lags, scale=1000),
            "cpu_wait_ms": summary(probe.waits, scale=1000),
            "what_ran": self.settings["bench_what_ran"].report(),
            "sampler_running": sampler.running,
            "time": time.time(),
        }
        if self.get_argument("timeline", None):
            body["timeline"] = self.settings["bench_what_ran"].timeline
        if self.get_argument("raw", None):
            body["lags_s"] = list(probe.lags)
            body["cpu_waits_s"] = list(probe.waits)
            body["cycle_s"] = list(stats.cycle_s)
        probe_action = self.get_argument("probe", None)
        if probe_action == "start":
            probe.start()
        elif probe_action == "stop":
            probe.stop()
        if self.get_argument("reset", None):
            probe.clear()
            self.settings["bench_what_ran"].reset()
            for series in (stats.device_read_s, stats.process_read_s, stats.loop_work_s, stats.cycle_s, stats.cycle_with_processes_s):
                series.clear()
        self.finish(json.dumps(body))


def main(argv: list[str]) -> int:
    options = json.loads(argv[0])
    config = Config(
        {
            "ServerApp": {
                "port": options["port"],
                "port_retries": 0,
                "open_browser": False,
                "allow_root": True,  # benchmark harness; containers often run as root
                "root_dir": options["root_dir"],
                "jpserver_extensions": {"jupyter_gpuburst": True},
            },
            "IdentityProvider": {"token": options["token"]},
            "GPUBurstServerExtension": {
                "backend": options["backend"],
                "sampling_period_s": options["period_s"],
                "sim_gpus": options.get("gpus", 1),
            },
        }
    )
    # the benchmark may be killed outright (a test's timeout): the server then stops as on SIGTERM
    on_parent_exit(lambda: os.kill(os.getpid(), signal.SIGTERM))
    app = ServerApp.instance(config=config)
    app.initialize(argv=[])
    what_ran = WhatRan()
    what_ran.install()
    app.web_app.settings["bench_what_ran"] = what_ran
    app.web_app.settings["bench_probe"] = LagProbe(what_ran)
    app.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(app.base_url, "/api/gpuburst-bench/stats"), StatsHandler),
            (url_path_join(app.base_url, "/api/gpuburst-bench/floor-stream"), FloorStreamHandler),
        ],
    )
    procs, refs = standin_kernels(int(options.get("kernels", 0)))
    # the benchmark kills these even when the server itself had to be killed
    with open(os.path.join(options["root_dir"], "standin-pids.json"), "w") as f:
        json.dump([p.pid for p in procs], f)
    sampler = app.web_app.settings["gpuburst_sampler"]
    # A B block's clients never all leave before it ends, so the lease (three periods in
    # production) only sets how long the next block waits for the sampler to pause
    sampler.lease_s = float(options["period_s"])
    app.web_app.settings["bench_floor_ticker"] = FloorTicker(sampler, float(options["period_s"]))
    real_source = sampler.kernel_source

    async def kernels_with_standins():
        return [*(await real_source()), *refs]

    sampler.kernel_source = kernels_with_standins
    take_encoded = sampler._take_encoded

    def timed_take_encoded(kernels, now):
        started = time.monotonic()
        try:
            return take_encoded(kernels, now)
        finally:
            what_ran.note_worker(started, time.monotonic() - started)

    sampler._take_encoded = timed_take_encoded
    try:
        app.start()
    finally:
        stop_standins(procs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
