"""The jupyter_server extension: GPU telemetry and placement for the user's server."""

from __future__ import annotations

import asyncio
import os

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop
from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate

from jupyter_gpuburst.core import heap
from jupyter_gpuburst.core.keys import BACKEND_ENV
from jupyter_gpuburst.gpu import simulated
from jupyter_gpuburst.gpu.backend import BACKEND_NAMES
from jupyter_gpuburst.gpu.kernel_source import ServerKernelSource
from jupyter_gpuburst.gpu.sampler import Sampler
from jupyter_gpuburst.server import handlers
from jupyter_gpuburst.server.activity import reporter_from_env
from jupyter_gpuburst.server.kernels import websocket, withdraw
from jupyter_gpuburst.server.kernels.handlers import GPUKernelProfilesHandler, GPUKernelsHandler
from jupyter_gpuburst.server.kernels.usage import untrack_probes
from jupyter_gpuburst.server.placement import placement_from_env

# time for open streams to send `stopping` when the server stops (a write and a flush each)
STREAMS_FLUSH_S = 0.2


class GPUBurstServerExtension(ExtensionApp):
    """Serves /api/gpuburst/{placement,gpus,history,stream} (see docs/api.md)."""

    name = "jupyter_gpuburst"
    load_other_extensions = True

    backend = Enum(
        BACKEND_NAMES,
        config=True,
        help="""GPU telemetry backend. 'auto' and 'nvml' read the GPU through NVML and, when no
        GPU is visible, report why ('no NVIDIA driver found ...'); 'simulated' shows simulated GPUs
        driven by the running kernels (labelled simulated; for demos and tests); 'none' turns
        telemetry off. Default: $JUPYTER_GPUBURST_BACKEND, else 'auto'.""",
    )

    @default("backend")
    def _backend_default(self) -> str:
        value = os.environ.get(BACKEND_ENV, "auto").strip() or "auto"
        if value not in BACKEND_NAMES:
            raise TraitError(f"{BACKEND_ENV}={value!r}: choose one of {', '.join(BACKEND_NAMES)}")
        return value

    sampling_period_s = Float(
        1.0,
        config=True,
        help="Seconds between GPU samples while someone listens; every client shares each sample.",
    )
    process_sampling_period_s = Float(
        5.0,
        config=True,
        help="""Seconds between reads of the GPU process list (used for per-kernel memory). The
        list costs milliseconds per read, so it is read less often than utilization; it is also
        re-read when a kernel starts or stops. Must not be shorter than sampling_period_s.""",
    )
    freeze_heap_at_start = Bool(
        True,
        config=True,
        help="""Once the server is up, collect garbage once and freeze what is left (gc.freeze):
        the server's imports and configuration, several hundred thousand objects that live as
        long as it does. Otherwise the first full collections walk them all, holding the event
        loop, and with it every request and telemetry stream, for 90 ms or more at a time.
        Objects allocated later are collected as before. Turn off where something else in this
        server manages the collector.""",
    )
    history_length = Int(300, config=True, help="Number of recent samples /api/gpuburst/history returns.")
    keepalive_s = Float(15.0, config=True, help="Seconds between keepalive comments on an idle event stream.")
    sim_gpus = Int(config=True, help="Number of simulated GPUs (default: $JUPYTER_GPUBURST_SIM_GPUS, else 1).")
    sim_model = Unicode(
        config=True,
        help=f"Simulated GPU model, one of: {', '.join(simulated.MODELS)} (default: $JUPYTER_GPUBURST_SIM_MODEL, else the first).",
    )

    @default("sim_gpus")
    def _sim_gpus_default(self) -> int:
        try:
            return simulated.config_from_env()[0]
        except ValueError as exc:
            raise TraitError(str(exc)) from None

    @default("sim_model")
    def _sim_model_default(self) -> str:
        try:
            return simulated.config_from_env()[1]
        except ValueError as exc:
            raise TraitError(str(exc)) from None

    @validate("sampling_period_s", "process_sampling_period_s", "keepalive_s")
    def _positive(self, proposal):
        if proposal.value <= 0:
            raise TraitError(f"GPUBurstServerExtension.{proposal.trait.name} must be positive, got {proposal.value}")
        return proposal.value

    @validate("history_length")
    def _history_positive(self, proposal):
        if proposal.value < 1:
            raise TraitError(f"GPUBurstServerExtension.history_length must be at least 1, got {proposal.value}")
        return proposal.value

    @validate("sim_gpus")
    def _sim_gpus_range(self, proposal):
        if not 1 <= proposal.value <= 16:
            raise TraitError(f"GPUBurstServerExtension.sim_gpus must be 1-16, got {proposal.value}")
        return proposal.value

    @validate("sim_model")
    def _sim_model_known(self, proposal):
        if simulated.model_name(proposal.value) not in simulated.MODELS:
            raise TraitError(f"GPUBurstServerExtension.sim_model {proposal.value!r} unknown; choose from {', '.join(simulated.MODELS)}")
        return proposal.value

    sampler: Sampler | None = None
    activity = None
    stopping: handlers.Stopping | None = None

    def initialize_settings(self) -> None:
        serverapp = self.serverapp
        self.stopping = handlers.Stopping()
        untrack_probes(serverapp.kernel_manager)
        kernel_source = ServerKernelSource(serverapp.kernel_manager, getattr(serverapp, "session_manager", None))
        process_period = self.process_sampling_period_s
        if process_period < self.sampling_period_s:
            self.log.warning(
                "GPUBurstServerExtension.process_sampling_period_s (%s) < sampling_period_s (%s); using %s",
                process_period,
                self.sampling_period_s,
                self.sampling_period_s,
            )
            process_period = self.sampling_period_s
        simulated_backend = self.backend == "simulated"
        self.sampler = Sampler(
            backend=self.backend,
            kernel_source=kernel_source,
            period_s=self.sampling_period_s,
            process_period_s=process_period,
            history_length=self.history_length,
            # The simulation settings (and their env) only matter, and are only checked, when used.
            sim_gpus=self.sim_gpus if simulated_backend else 1,
            sim_model=self.sim_model if simulated_backend else None,
        )
        self.settings.update(
            {
                handlers.SAMPLER_SETTING: self.sampler,
                handlers.PLACEMENT_SETTING: placement_from_env(os.environ),
                handlers.KEEPALIVE_SETTING: self.keepalive_s,
                handlers.STOPPING_SETTING: self.stopping,
            }
        )
        self._install_gpu_kernels()
        # a pending kernel (a GPU kernel) that could not start fails its websocket's handshake
        # without an error page, which the hub's proxy wrote to the browser's closed connection
        if not websocket.install(self.settings, self.serverapp):
            self.log.info(
                "jupyter_gpuburst: ServerApp.kernel_websocket_connection_class %s kept: a kernel that "
                "cannot start fails its websocket's handshake with that class's answer",
                self.settings.get(websocket.SETTING),
            )
        self.activity = reporter_from_env(self.sampler, serverapp.kernel_manager)
        self.settings[handlers.ACTIVITY_SETTING] = self.activity
        if self.activity is not None:
            IOLoop.current().add_callback(self.activity.start)
        if self.freeze_heap_at_start:
            # runs when the loop starts: after every extension has loaded, before any request
            IOLoop.current().add_callback(heap.freeze_once)
        self.log.info(
            "jupyter_gpuburst: GPU telemetry backend %r, sampling every %s s while someone listens",
            self.backend,
            self.sampling_period_s,
        )

    def _install_gpu_kernels(self) -> None:
        """Kernelspecs for the hub's GPU kernel profiles (none outside a hub, or without the scope)."""
        from jupyter_gpuburst.server.kernels.specs import install_kernelspecs

        names = install_kernelspecs(self.serverapp.kernel_spec_manager, self.serverapp.runtime_dir)
        if names:
            self.log.info("jupyter_gpuburst: GPU kernels offered: %s", ", ".join(names))
            # A GPU kernel takes a pod's start (a pull, a queue, a donor's hop) to be ready. As a
            # pending kernel, its session exists at once: JupyterLab queues a cell run meanwhile
            # and sends it when the kernel's websocket opens (jupyter_server opens it once the
            # kernel is ready, or closes it with the start's error), instead of dropping it.
            self.serverapp.kernel_manager.use_pending_kernels = True
            # ...and shutting one down that still waits (for a GPU, in the hub's queue) must not
            # wait for the start it cancels
            withdraw.install(self.serverapp.kernel_manager)

    def initialize_handlers(self) -> None:
        self.handlers.extend(
            [
                (r"/api/gpuburst/placement", handlers.PlacementHandler),
                (r"/api/gpuburst/gpus", handlers.GPUsHandler),
                (r"/api/gpuburst/history", handlers.HistoryHandler),
                (r"/api/gpuburst/stream", handlers.StreamHandler),
                (r"/api/gpuburst/kernels", GPUKernelsHandler),
                (r"/api/gpuburst/kernel-profiles", GPUKernelProfilesHandler),
                (r"/api/gpuburst/culling", handlers.CullingHandler),
                (r"/api/gpuburst/culling/keep", handlers.CullingKeepHandler),
            ]
        )

    async def stop_extension(self) -> None:
        # open streams send their pages `stopping`, then end, before the sampler goes
        if self.stopping is not None:
            self.stopping.is_set = True
        if self.sampler is not None:
            self.sampler.wake()
            await asyncio.sleep(STREAMS_FLUSH_S)
        if self.activity is not None:
            await self.activity.close()
        if self.sampler is not None:
            await self.sampler.close()
