"""GPU activity of this server and its GPU kernels, reported to the hub's culler with the
server's own token; the hub's reply (warnings, stops) is what the Lab panel shows.

Only GPUs and kernels count: a GPU's utilization over the hub's threshold, a kernel executing,
or, where NVML reads no utilization (some MIG slices), the GPU's memory in use changing. HTTP
requests, an open panel or an open tab never do. Ages, not timestamps, go to the hub (its clock
may differ from this pod's), and every report is numbered, so the hub can refuse a replayed one.

Each report also says what the GPUs used since the previous one (``use``: peak memory and
utilization, see ``gpuuse``), for the GPU-hours ledger's right-sizing; the hub's reply says
whether it keeps them (``measure_use``), and then the GPUs are sampled even where nothing is culled.
A GPU kernel's entry also says how long ago its first cell began, where its pod says so, and
the report says the same of this server's own kernels (``first_cell_ago_s``, once one ran): a
lab's report times each student to their first GPU cell (hub/labs/report.py). A cell is an
``execute_input`` on a kernel's IOPub, which kernels send for each execution a person asked for
(not for an extension's silent ones), watched from the moment jupyter_server watches the kernel:
a kernel starting, a completion or an inspection is no cell.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import secrets
import time
from typing import Any

from jupyter_client.session import Session
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.gpu.backend import MEMORY_ACTIVITY_BYTES
from jupyter_gpuburst.server.gpuuse import UseSince, kernel_use

log = logging.getLogger(__name__)

DEFAULT_PERIOD_S = 60.0
SAMPLE_EVERY_S = 5.0
# a first cell's age is for a lab's report, which hears it within a period: the hub refuses an
# age over 30 days, and a server running that long would have every report refused
FIRST_CELL_TOLD_S = 24 * 3600.0


class ActivityReporter:
    """Samples this server's GPUs and kernels every few seconds; reports once per hub period."""

    def __init__(self, url: str, token: str, server_name: str, sampler: Any, kernel_manager: Any, threshold: float = 0.05) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.server_name = server_name
        self.sampler = sampler
        self.kernel_manager = kernel_manager
        self.threshold = threshold
        self.kernel_thresholds: dict[str, float] = {}
        self.period_s = DEFAULT_PERIOD_S
        self.boot = secrets.token_hex(8)
        self.seq = 0
        self.busy_at: float | None = None  # monotonic; None until a GPU has been read
        self._gpu_busy_last_sample = False
        self._cell_streams: dict[str, Any] = {}  # kernel id -> its IOPub stream, watched for cells
        # kernels watched since jupyter_server began watching them: only these can say which
        # cell was their first (one watched later may have run cells before)
        self._watched_from_start: set[str] = set()
        self.first_cell_at: float | None = None  # monotonic: the first cell of this server's own kernels
        self.gpu_visible = False
        self.basis = "utilization"
        self._memory: dict[str, int] = {}
        self.use = UseSince()
        self.latest: dict[str, Any] | None = None
        self.error: str | None = None
        self.stopped: list[dict[str, Any]] = []  # GPU kernels the hub stopped, for the panel
        self._task: asyncio.Task | None = None

    # ---- measuring ------------------------------------------------------------------------
    def _kernels(self) -> list[tuple[str, Any]]:
        out = []
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            try:
                out.append((kernel_id, self.kernel_manager.get_kernel(kernel_id)))
            except KeyError:
                continue
        return out

    async def sample(self) -> None:
        """One look at this server's GPUs and kernels (not its GPU kernels' pods)."""
        now = time.monotonic()
        kernels = self._kernels()
        self._watch_cells(kernels)
        if self.busy_at is None or any(getattr(k, "execution_state", "") == "busy" and not _remote(k) for _, k in kernels):
            self.busy_at = now
        try:
            data = (await self.sampler.current()).data if self.sampler is not None else {"available": False}
        except Exception:  # noqa: BLE001 - telemetry failing is "no reading", never "idle"
            log.debug("GPU activity: sampling failed", exc_info=True)
            data = {"available": False}
        self.gpu_visible = bool(data.get("available")) and bool(data.get("gpus"))
        gpu_busy = False
        if self.gpu_visible:
            basis = "utilization"
            for gpu in data["gpus"]:
                util = gpu.get("utilization")
                used = int(gpu.get("memory_used_bytes") or 0)
                before = self._memory.get(gpu.get("uuid", ""), used)
                self._memory[gpu.get("uuid", "")] = used
                if util is None:
                    basis = "memory"
                    gpu_busy = gpu_busy or abs(used - before) > MEMORY_ACTIVITY_BYTES
                else:
                    gpu_busy = gpu_busy or util >= self.threshold
            self.basis = basis
            self.use.add_devices(data["gpus"])
        # the first reading that finds the GPU idle after a busy one also counts as busy: it went
        # idle somewhere since the last sample, and counting from here makes a stop at most one
        # sample late, never before its timeout
        if gpu_busy or self._gpu_busy_last_sample:
            self.busy_at = now
        self._gpu_busy_last_sample = gpu_busy

    # A cell shorter than a sample would fall between two samples of the kernels' execution
    # state, so each local kernel's IOPub is watched for execute_request status messages (as
    # jupyter_server watches it for its own activity); the start and end of every cell count.
    def _watch_cells(self, kernels: list[tuple[str, Any]]) -> None:
        for kernel_id in set(self._cell_streams) - {kernel_id for kernel_id, _ in kernels}:
            self._cell_streams.pop(kernel_id).close()
            self._watched_from_start.discard(kernel_id)
        for kernel_id, kernel in kernels:
            if kernel_id not in self._cell_streams:
                self._watch(kernel_id, kernel)

    def _watch(self, kernel_id: str, kernel: Any) -> bool:
        if _remote(kernel) or not _ready(kernel):
            return False
        try:
            stream = kernel.connect_iopub()
            session = Session(config=kernel.session.config, key=kernel.session.key)
        except Exception:  # noqa: BLE001 - not connectable yet: its execution state still counts
            log.debug("GPU activity: cannot watch kernel %s yet", kernel_id, exc_info=True)
            return False
        stream.on_recv(functools.partial(self._on_iopub, kernel_id, session))
        self._cell_streams[kernel_id] = stream
        return True

    def follow_kernel_starts(self) -> None:
        """Watch each kernel's cells from the moment jupyter_server begins watching its activity
        (once it is ready, and again after a restart): before its first cell can be sent, so
        that cell is never missed, as it could be between two samples."""
        manager = self.kernel_manager
        begin = getattr(manager, "start_watching_activity", None)
        if begin is None or getattr(begin, "_gpuburst_follows", False):
            return

        @functools.wraps(begin)
        def start_watching_activity(kernel_id: str, *args: Any, **kwargs: Any) -> Any:
            result = begin(kernel_id, *args, **kwargs)
            try:
                self._watch_from_start(kernel_id, manager.get_kernel(kernel_id))
            except Exception:  # noqa: BLE001 - the kernel starts whatever its watch does
                log.debug("GPU activity: cannot watch kernel %s from its start", kernel_id, exc_info=True)
            return result

        start_watching_activity._gpuburst_follows = True  # type: ignore[attr-defined]
        manager.start_watching_activity = start_watching_activity

    def _watch_from_start(self, kernel_id: str, kernel: Any) -> None:
        stream = self._cell_streams.pop(kernel_id, None)
        if stream is not None:  # a restarted kernel's channels may be new
            stream.close()
        if self._watch(kernel_id, kernel):
            self._watched_from_start.add(kernel_id)

    def _on_iopub(self, kernel_id: str, session: Any, parts: list[bytes]) -> None:
        try:
            _, message = session.feed_identities(parts)
            msg = session.deserialize(message, content=False)
        except Exception:  # noqa: BLE001 - a message we cannot read says nothing either way
            return
        if (msg.get("parent_header") or {}).get("msg_type") != "execute_request":
            return
        msg_type = msg["header"].get("msg_type")
        if msg_type == "status":
            self.busy_at = time.monotonic()
        elif msg_type == "execute_input" and self.first_cell_at is None and kernel_id in self._watched_from_start:
            self.first_cell_at = time.monotonic()

    async def kernel_entries(self) -> dict[str, dict[str, Any]]:
        """Each GPU kernel's idle age: its pod measures its own GPU (see kernel/gpu.py)."""
        from jupyter_gpuburst.server.kernels.usage import ask_usage

        entries: dict[str, dict[str, Any]] = {}

        async def one(kernel_id: str, kernel: Any) -> None:
            record_id = (_remote(kernel) or {}).get("id")
            if not record_id:
                return
            threshold = self.kernel_thresholds.get(record_id, self.threshold)
            usage = await ask_usage(kernel, content={keys.BUSY_THRESHOLD_FIELD: threshold})
            gpu = (usage or {}).get("gpu") or {}
            idle = gpu.get("busy_ago_s")
            if getattr(kernel, "execution_state", "") == "busy":
                idle = 0.0
            if not isinstance(idle, int | float) or isinstance(idle, bool) or idle < 0:
                return  # no answer: the hub hears nothing of it, and treats it as unknown
            entries[record_id] = {"kernel_id": kernel_id, "idle_s": round(float(idle), 1), "basis": gpu.get("busy_basis") or "utilization"}
            first_cell = gpu.get("first_cell_ago_s")
            if isinstance(first_cell, int | float) and not isinstance(first_cell, bool) and 0 <= first_cell <= FIRST_CELL_TOLD_S:
                # for a kernel-mode lab's report: how long ago the kernel's first cell began
                entries[record_id]["first_cell_ago_s"] = float(first_cell)
            figures = kernel_use(gpu)
            if figures is not None:
                entries[record_id]["use"] = figures

        await asyncio.gather(*(one(kid, k) for kid, k in self._kernels()))
        return entries

    async def body(self) -> dict[str, Any]:
        self.seq += 1
        idle = None
        if self.gpu_visible and self.busy_at is not None:
            idle = round(max(0.0, time.monotonic() - self.busy_at), 1)
        body = {
            "server_name": self.server_name,
            "boot": self.boot,
            "seq": self.seq,
            "gpu_idle_s": idle,
            "basis": self.basis,
            "kernels": await self.kernel_entries(),
            "use": self.use.take(),
        }
        if self.first_cell_at is not None and time.monotonic() - self.first_cell_at <= FIRST_CELL_TOLD_S:
            # for a server-mode lab's report: how long ago the first cell of this server's own kernels began
            body["first_cell_ago_s"] = round(time.monotonic() - self.first_cell_at, 1)
        return body

    # ---- talking to the hub -----------------------------------------------------------------
    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await AsyncHTTPClient().fetch(
            self.url + path,
            method="POST",
            body=json.dumps(body),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            request_timeout=30,
        )
        return json.loads(response.body or b"{}")

    async def report(self) -> dict[str, Any] | None:
        body = await self.body()
        try:
            reply = await self._post("", body)
        except HTTPClientError as exc:
            self.error = _message(exc)
            log.warning("GPU activity: the hub refused a report: %s", self.error)
            if exc.code >= 500:  # the hub or its proxy is away, not a report it refused
                self.use.give_back(body.get("use"))
            return None
        except Exception as exc:  # noqa: BLE001 - the hub restarting: try again next period
            self.error = f"the hub cannot be reached ({exc.__class__.__name__})"
            log.info("GPU activity: %s", self.error)
            self.use.give_back(body.get("use"))
            return None
        self.error = None
        self.latest = reply
        period = reply.get("period_s")
        if isinstance(period, int | float) and period > 0:
            self.period_s = float(period)
        if isinstance(reply.get("threshold"), int | float):
            self.threshold = float(reply["threshold"])
        self.kernel_thresholds = {k: float(v) for k, v in (reply.get("threshold_by_kernel") or {}).items()}
        for stop in reply.get("stopped") or []:
            await self._stopped(stop)
        return reply

    async def _stopped(self, stop: dict[str, Any]) -> None:
        """The hub stopped one of our GPU kernels: shut it down here too, so that nothing
        restarts it on its own, and keep the hub's sentence for the notebook's panel."""
        kernel_id = stop.get("kernel_id")
        if not isinstance(kernel_id, str):
            return
        if all(s.get("kernel_id") != kernel_id or s.get("at") != stop.get("at") for s in self.stopped):
            self.stopped = [*self.stopped[-19:], {"kernel_id": kernel_id, "reason": str(stop.get("reason", "")), "at": stop.get("at")}]
        if kernel_id in self.kernel_manager:
            log.info("GPU activity: the hub stopped GPU kernel %s: %s", kernel_id, stop.get("reason"))
            try:
                await self.kernel_manager.shutdown_kernel(kernel_id, now=True)
            except Exception:  # noqa: BLE001 - its pod is gone already; the record goes with it
                log.debug("GPU activity: shutting down %s", kernel_id, exc_info=True)

    async def keep(self, target: str) -> tuple[int, str]:
        try:
            reply = await self._post("/keep", {"server_name": self.server_name, "target": target})
        except HTTPClientError as exc:
            return (exc.code if exc.code < 600 else 502), _message(exc)
        except Exception as exc:  # noqa: BLE001
            return 502, f"the hub cannot be reached ({exc.__class__.__name__})"
        await self.report()
        return 200, str(reply.get("message", "kept"))

    def state(self) -> dict[str, Any]:
        """What the panel shows: the hub's last reply, and the GPU kernels it stopped."""
        return {
            "reporting": True,
            "error": self.error,
            "basis": self.basis if self.gpu_visible else None,
            "culling": self.latest,
            "stopped": self.stopped,
        }

    # ---- the loop -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self.follow_kernel_starts()
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for stream in self._cell_streams.values():
            stream.close()
        self._cell_streams.clear()
        self._watched_from_start.clear()

    @property
    def culling_off(self) -> bool:
        """The hub culls nothing of this server and keeps no GPU use: report once a period,
        sample nothing."""
        if (self.latest or {}).get("measure_use"):
            return False
        targets = (self.latest or {}).get("targets") or []
        return bool(targets) and all(t.get("state") == "off" for t in targets)

    async def _run(self) -> None:
        next_report = time.monotonic()
        while True:
            if self.culling_off:
                # the hub's reply says whether that changed (an admin's new config); the kernels
                # are still watched for their first cell, and gone ones' streams closed
                await asyncio.sleep(self.period_s)
                self._watch_cells(self._kernels())
                await self.report()
                continue
            try:
                await self.sample()
                if time.monotonic() >= next_report:
                    await self.report()
                    next_report = time.monotonic() + self.period_s
            except Exception:  # noqa: BLE001 - reporting never stops for one bad round
                log.warning("GPU activity: a report failed", exc_info=True)
            await asyncio.sleep(min(SAMPLE_EVERY_S, self.period_s))


def _remote(kernel: Any) -> dict[str, Any] | None:
    provisioner = getattr(kernel, "provisioner", None)
    placement = getattr(provisioner, "public_placement", None)
    return placement() if callable(placement) else None


def _ready(kernel: Any) -> bool:
    """A pending kernel (jupyter_server's use_pending_kernels) has no channels until it is ready."""
    ready = getattr(kernel, "ready", None)
    return ready is None or (ready.done() and not ready.cancelled() and ready.exception() is None)


def _message(exc: HTTPClientError) -> str:
    try:
        return str(json.loads(exc.response.body)["message"])  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001
        return f"{exc.code} {exc.message}"


def reporter_from_env(sampler: Any, kernel_manager: Any, environ: dict[str, str] | None = None) -> ActivityReporter | None:
    """The reporter, where the hub gave this server its activity URL and a token."""
    environ = os.environ if environ is None else environ
    url, token = environ.get(keys.ACTIVITY_URL_ENV), environ.get("JUPYTERHUB_API_TOKEN")
    if not url or not token:
        return None
    return ActivityReporter(url, token, environ.get("JUPYTERHUB_SERVER_NAME", ""), sampler, kernel_manager)
