"""The server under test for `gpuburst bench telemetry`: a real jupyter_server with the extension.

Adds, for the benchmark only, an event-loop lag probe and `GET /api/gpuburst-bench/stats`
(sampler timings and probe percentiles; token-authenticated like any API). Run as
`python -m jupyter_gpuburst.bench.telemetry_server CONFIG_JSON`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from jupyter_server.base.handlers import APIHandler
from jupyter_server.serverapp import ServerApp
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets.config import Config

PROBE_INTERVAL_S = 0.005


def percentile(values, q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class LagProbe:
    """Measures how late a short sleep wakes up: the time the loop was busy with something else."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self.run())

    def stop(self) -> None:
        # The probe wakes 200 times a second: it must be off while CPU use is measured.
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.lags.append(max(0.0, loop.time() - start - PROBE_INTERVAL_S))


class StatsHandler(APIHandler):
    _track_activity = False

    @web.authenticated
    def get(self) -> None:
        probe: LagProbe = self.settings["bench_probe"]
        stats = self.settings["gpuburst_sampler"].stats
        ms = lambda v: None if v is None else round(v * 1000, 4)  # noqa: E731
        body = {
            "samples": stats.samples,
            "process_samples": stats.process_samples,
            "sample_p99_ms": ms(percentile(stats.device_read_s, 99)),
            "sample_p50_ms": ms(percentile(stats.device_read_s, 50)),
            "process_sample_p99_ms": ms(percentile(stats.process_read_s, 99)),
            "sampler_loop_work_p99_ms": ms(percentile(stats.loop_work_s, 99)),
            "event_loop_lag_p99_ms": ms(percentile(probe.lags, 99)),
            "event_loop_lag_p50_ms": ms(percentile(probe.lags, 50)),
            "probe_count": len(probe.lags),
            "time": time.time(),
        }
        probe_action = self.get_argument("probe", None)
        if probe_action == "start":
            probe.start()
        elif probe_action == "stop":
            probe.stop()
        if self.get_argument("reset", None):
            probe.lags.clear()
            stats.device_read_s.clear()
            stats.process_read_s.clear()
            stats.loop_work_s.clear()
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
            },
        }
    )
    app = ServerApp.instance(config=config)
    app.initialize(argv=[])
    probe = LagProbe()
    app.web_app.settings["bench_probe"] = probe
    app.web_app.add_handlers(".*$", [(url_path_join(app.base_url, "/api/gpuburst-bench/stats"), StatsHandler)])
    app.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
