"""One sampler per server process: every tab, request and stream shares its samples.

The sampler runs only while someone listens (a stream subscriber, or a request within the last
few periods), reads the GPU in its own worker thread so NVML never blocks the event loop, reads
the expensive process list less often than utilization, serialises each sample once for all
clients (the Server-Sent Events frame too), and keeps the last `history_length` samples.
Process trees come from a cached table of /proc's parent links (`proctable`): /proc is listed
once per process read, not scanned once per kernel. Readers are woken in small batches per
event-loop turn, so a sample for 50 stream clients never holds the loop for all 50 writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from jupyter_gpuburst.gpu.attribution import KernelPids, attribute, resolve
from jupyter_gpuburst.gpu.backend import GPUBackend, GPUProcess, GPUUnavailable, KernelRef
from jupyter_gpuburst.gpu.proctable import ProcessTable
from jupyter_gpuburst.gpu.select import open_backend

log = logging.getLogger(__name__)

KernelSource = Callable[[], Awaitable[Sequence[KernelRef]]]
# readers woken per event-loop turn when a sample is published
FANOUT_BATCH = 8


class Sample:
    """One sample: the JSON the API returns, already encoded once for every client.

    Only the encoded bytes are kept. The history holds 300 samples of 8 GPUs and 50 kernels;
    as dicts they would be some 50,000 objects for the server's garbage collector to walk on
    every collection of the older generations, pausing every request. ``data`` decodes them
    when someone asks (tests, the benchmark, a reader who may not see kernels).
    """

    __slots__ = ("encoded", "seq", "_data", "_views")

    def __init__(self, data: dict | None = None, encoded: bytes = b"", seq: int = 0) -> None:
        self.encoded = encoded
        self.seq = seq
        self._data = data  # kept only when given (tests); a sampler's sample has its bytes only
        # other encodings (without kernels; as an SSE frame), made once on first use, then shared
        self._views: dict = {}

    @property
    def data(self) -> dict:
        return self._data if self._data is not None else json.loads(self.encoded)

    def body(self, kernels_visible: bool) -> bytes:
        """The JSON body; without the kernel list for readers who may not see kernels."""
        if kernels_visible:
            return self.encoded
        view = self._views.get("no-kernels")
        if view is None:
            view = self._views["no-kernels"] = _encode({**self.data, "kernels": []})
        return view

    def sse(self, kernels_visible: bool) -> bytes:
        """The whole ``event: sample`` frame for a stream: one allocation per sample, not per client."""
        key = ("sse", kernels_visible)
        frame = self._views.get(key)
        if frame is None:
            frame = self._views[key] = b"event: sample\ndata: " + self.body(kernels_visible) + b"\n\n"
        return frame


@dataclass
class SamplerStats:
    """Counters and timings, for the benchmark and for logs (not served by the API)."""

    samples: int = 0
    process_samples: int = 0
    device_read_s: deque = field(default_factory=lambda: deque(maxlen=100_000))
    process_read_s: deque = field(default_factory=lambda: deque(maxlen=100_000))
    loop_work_s: deque = field(default_factory=lambda: deque(maxlen=100_000))
    # the whole cycle: kernel list, device read, process read, attribution, encoding, publishing
    cycle_s: deque = field(default_factory=lambda: deque(maxlen=100_000))
    # the cycles among those that also re-read processes
    cycle_with_processes_s: deque = field(default_factory=lambda: deque(maxlen=100_000))


def _encode(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _no_kernels() -> Sequence[KernelRef]:
    return []


class Sampler:
    """Samples GPUs on demand, at most once per `period_s`, for any number of listeners."""

    def __init__(
        self,
        backend: str | GPUBackend = "auto",
        kernel_source: KernelSource = _no_kernels,
        period_s: float = 1.0,
        process_period_s: float = 5.0,
        history_length: int = 300,
        lease_periods: float = 3.0,
        sim_gpus: int = 1,
        sim_model: str | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"sampling period must be positive, got {period_s}")
        if process_period_s < period_s:
            raise ValueError(f"process sampling period ({process_period_s} s) must not be shorter than the sampling period ({period_s} s)")
        if history_length < 1:
            raise ValueError(f"history length must be at least 1, got {history_length}")
        self.period_s = period_s
        self.process_period_s = process_period_s
        self.lease_s = lease_periods * period_s
        self.kernel_source = kernel_source
        self._backend_spec = backend
        self._sim = (sim_gpus, sim_model)
        self._backend: GPUBackend | None = backend if isinstance(backend, GPUBackend) else None
        self._reason: str | None = None
        self._opened = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuburst-sampler")
        self._history: deque[Sample] = deque(maxlen=history_length)
        self._latest: Sample | None = None
        self._latest_at = 0.0  # loop time
        self._seq = 0
        self._listeners = 0
        self._lease_until = 0.0
        self._task: asyncio.Task | None = None
        # one future per waiting reader, woken in batches (see _publish)
        self._waiters: set[asyncio.Future] = set()
        self._processes: list[GPUProcess] = []
        self._resolved: dict[str, KernelPids] = {}
        self._processes_at = float("-inf")
        self._proctable = ProcessTable()
        self._closed = False
        self.stats = SamplerStats()

    # -- what handlers call ------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def listeners(self) -> int:
        return self._listeners

    async def current(self) -> Sample:
        """The latest sample if it is fresher than one period, else the next one."""
        self._touch()
        loop = asyncio.get_running_loop()
        if self._latest is not None and loop.time() - self._latest_at < self.period_s:
            return self._latest
        return await self.next_sample(self._latest)

    async def next_sample(self, after: Sample | None, timeout: float | None = None) -> Sample | None:
        """The first sample newer than `after`; waits for it (None after `timeout` seconds)."""
        if self._latest is not None and (after is None or self._latest.seq > after.seq):
            return self._latest
        self._ensure_running()
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(timeout, _expire, waiter) if timeout is not None else None
        try:
            return await waiter
        finally:
            self._waiters.discard(waiter)
            if timer is not None:
                timer.cancel()

    def history(self) -> list[Sample]:
        """The last `history_length` samples, oldest first (only those taken while someone listened)."""
        self._touch()
        return list(self._history)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Sampler]:
        """Keep sampling while the block runs (a stream client)."""
        self._listeners += 1
        self._ensure_running()
        try:
            yield self
        finally:
            self._listeners -= 1

    def wake(self) -> None:
        """Every caller waiting in ``next_sample`` gets None now, as if its timeout had passed."""
        for waiter in list(self._waiters):
            _expire(waiter)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down anyway
                await self._task
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        backend = self._backend
        if backend is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, backend.close)
        self._executor.shutdown(wait=True)

    # -- the loop ------------------------------------------------------------------------------
    def _touch(self) -> None:
        self._lease_until = asyncio.get_running_loop().time() + self.lease_s
        self._ensure_running()

    def _wanted(self) -> bool:
        return not self._closed and (self._listeners > 0 or asyncio.get_running_loop().time() < self._lease_until)

    def _ensure_running(self) -> None:
        if self._closed:
            raise RuntimeError("GPU sampler is closed")
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="gpuburst-sampler")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._wanted():
            started = loop.time()
            await self._sample_once()
            await asyncio.sleep(max(0.0, self.period_s - (loop.time() - started)))
        # No await between the check above and returning: a new listener either saw this task
        # alive (and this loop saw the listener), or starts a new task.

    async def _sample_once(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        process_samples = self.stats.process_samples
        try:
            kernels = list(await self.kernel_source())
        except Exception:  # noqa: BLE001 - a broken kernel manager must not stop telemetry
            log.exception("GPU telemetry: listing kernels failed")
            kernels = []
        t1 = time.perf_counter()
        try:
            encoded = await loop.run_in_executor(self._executor, self._take_encoded, kernels, time.time())
        except Exception as exc:  # noqa: BLE001
            log.exception("GPU telemetry: sampling failed")
            encoded = _encode(self._unavailable(f"telemetry error: {type(exc).__name__}", kernels, time.time()))
        t2 = time.perf_counter()
        self._seq += 1
        sample = Sample(encoded=encoded, seq=self._seq)
        self._latest, self._latest_at = sample, loop.time()
        self._history.append(sample)
        await self._publish(sample)
        self.stats.samples += 1
        done = time.perf_counter()
        self.stats.loop_work_s.append((t1 - t0) + (done - t2))
        self.stats.cycle_s.append(done - t0)
        if self.stats.process_samples != process_samples:
            self.stats.cycle_with_processes_s.append(done - t0)

    async def _publish(self, sample: Sample) -> None:
        """Wake the readers waiting for a sample, FANOUT_BATCH per event-loop turn.

        Woken all at once, 50 stream clients write and flush in one turn of the loop (several
        ms on a small machine), and every other request waits behind them; in batches, the loop
        serves other work between batches. Readers arriving meanwhile get ``_latest`` at once.
        """
        waiters, self._waiters = self._waiters, set()
        for i, waiter in enumerate(waiters, 1):
            if not waiter.done():
                waiter.set_result(sample)
            if i % FANOUT_BATCH == 0 and i < len(waiters):
                await asyncio.sleep(0)

    # -- the worker thread -------------------------------------------------------------------
    def _ensure_backend(self) -> GPUBackend:
        if self._backend is None:
            spec = self._backend_spec
            assert isinstance(spec, str)
            self._backend = open_backend(spec, *self._sim)
            self._opened = True
        elif not self._opened:
            try:
                self._backend.open()
            except GPUUnavailable as exc:
                self._reason = exc.reason
            self._opened = True
        return self._backend

    def _base(self, backend: GPUBackend, now: float) -> dict:
        return {
            "backend": backend.name,
            "simulated": backend.simulated,
            "available": True,
            "reason": None,
            "timestamp": now,
            "period_s": self.period_s,
        }

    def _unavailable(self, reason: str, kernels: Sequence[KernelRef], now: float) -> dict:
        backend = self._backend
        return {
            "backend": backend.name if backend is not None else "none",
            "simulated": bool(backend is not None and backend.simulated),
            "available": False,
            "reason": reason,
            "timestamp": now,
            "period_s": self.period_s,
            "gpus": [],
            "kernels": [{"kernel_id": k.kernel_id, "name": k.name, "notebook": k.notebook, "gpus": []} for k in kernels],
            "unattributed": [],
        }

    def _take_encoded(self, kernels: list[KernelRef], now: float) -> bytes:
        # Encoding here, not on the loop: with many GPUs and kernels it is the largest step.
        return _encode(self._take(kernels, now))

    def _take(self, kernels: list[KernelRef], now: float) -> dict:
        backend = self._ensure_backend()
        if self._reason is not None:
            return self._unavailable(self._reason, kernels, now)
        t0 = time.perf_counter()
        try:
            devices = backend.read_devices(kernels, now)
        except GPUUnavailable as exc:
            return self._unavailable(exc.reason, kernels, now)
        self.stats.device_read_s.append(time.perf_counter() - t0)

        kernel_ids = {k.kernel_id for k in kernels}
        if now - self._processes_at >= self.process_period_s or kernel_ids != set(self._resolved):
            # The kernel set changed or the list is old: re-read processes and process trees.
            t1 = time.perf_counter()
            self._processes = backend.read_processes(kernels, now)
            if self._proctable.refresh() or kernel_ids != set(self._resolved):
                # trees are walked again only when a process started or exited, or a kernel
                # came or went: most process reads find the same processes as the last one
                resolved = resolve(kernels, self._proctable.tree, self._proctable.aliases)
                self._resolved = {kp.kernel.kernel_id: kp for kp in resolved}
            self._processes_at = now
            self.stats.process_samples += 1
            self.stats.process_read_s.append(time.perf_counter() - t1)
        current = [KernelPids(k, self._resolved[k.kernel_id].pids, self._resolved[k.kernel_id].aliases) for k in kernels]
        kernels_json, unattributed = attribute(current, self._processes, backend.verify_pid)

        data = self._base(backend, now)
        data["gpus"] = [d.to_json() for d in devices]
        data["kernels"] = kernels_json
        data["unattributed"] = unattributed
        return data
