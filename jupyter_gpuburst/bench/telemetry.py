"""`gpuburst bench telemetry`: the server extension's GPU telemetry under load, as JSON.

Starts a real jupyter_server with the extension in a child process, and measures in three
phases of `--seconds` each:
  1. idle, nobody listening: the sampler is paused (baseline CPU of the server process);
  2. one stream client at the default period (an open panel): CPU added by the extension;
  3. `--clients` concurrent stream clients: sample cost, samples shared per client delivery,
     and the event loop's lag (a 5 ms sleep probe inside the server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time

import aiohttp
import psutil


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nvml_works() -> bool:
    from jupyter_gpuburst.server.gpu.backend import GPUUnavailable
    from jupyter_gpuburst.server.gpu.nvml import NVMLBackend

    backend = NVMLBackend()
    try:
        backend.open()
    except GPUUnavailable:
        return False
    backend.close()
    return True


class Bench:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.headers = {"Authorization": f"token {token}"}
        self.events = 0

    async def stats(self, session: aiohttp.ClientSession, reset: bool = False, probe: str | None = None) -> dict:
        query = "&".join(q for q in ("reset=1" if reset else "", f"probe={probe}" if probe else "") if q)
        url = f"{self.base}/api/gpuburst-bench/stats" + ("?" + query if query else "")
        async with session.get(url, headers=self.headers) as response:
            response.raise_for_status()
            return await response.json()

    async def wait_ready(self, session: aiohttp.ClientSession, proc: subprocess.Popen, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
            try:
                async with session.get(f"{self.base}/api/status", headers=self.headers) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError("the server did not become ready in time")

    async def stream_client(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        async with session.get(
            f"{self.base}/api/gpuburst/stream",
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as response:
            response.raise_for_status()
            reader = asyncio.ensure_future(self._read(response))
            await stop.wait()
            reader.cancel()

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        async for line in response.content:
            if line.startswith(b"event: sample"):
                self.events += 1


async def cpu_percent_async(proc: psutil.Process, seconds: float) -> float:
    """CPU used by one process over `seconds`, in percent of one core (clock-tick resolution)."""
    before = proc.cpu_times()
    await asyncio.sleep(seconds)
    after = proc.cpu_times()
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / seconds


async def run(args: argparse.Namespace) -> dict:
    backend = args.backend
    if backend == "auto":
        backend = "nvml" if _nvml_works() else "simulated"
    port, token = _free_port(), secrets.token_hex(16)
    root = tempfile.mkdtemp(prefix="gpuburst-bench-")
    options = {"port": port, "token": token, "root_dir": root, "backend": backend, "period_s": args.period}
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": os.path.join(root, ".jupyter"),
        "JUPYTER_RUNTIME_DIR": os.path.join(root, ".runtime"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.bench.telemetry_server", json.dumps(options)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=root,
    )
    server = psutil.Process(proc.pid)
    bench = Bench(f"http://127.0.0.1:{port}", token)
    result: dict = {
        "benchmark": "telemetry",
        "backend": backend,
        "clients": args.clients,
        "seconds": args.seconds,
        "period_s": args.period,
    }
    try:
        connector = aiohttp.TCPConnector(limit=args.clients + 10)
        async with aiohttp.ClientSession(connector=connector) as session:
            await bench.wait_ready(session, proc)
            # One kernel, so each sample also attributes a real process.
            async with session.post(f"{bench.base}/api/kernels", headers=bench.headers, json={"name": "python3"}) as r:
                kernel_ok = r.status == 201
            async with session.get(f"{bench.base}/api/gpuburst/gpus", headers=bench.headers) as r:
                first = await r.json()
            result["gpus"] = len(first["gpus"])
            result["gpu_names"] = sorted({g["name"] for g in first["gpus"]})
            result["available"] = first["available"]
            result["kernel_started"] = kernel_ok
            await asyncio.sleep(args.period * 4)  # let the request's lease run out: sampler pauses

            # Phase 1: nobody listens (CPU measured with the lag probe off, then lag with it on).
            s0 = await bench.stats(session, reset=True)
            result["cpu_idle_no_listener_percent"] = round(await cpu_percent_async(server, args.seconds), 3)
            await bench.stats(session, probe="start")
            await asyncio.sleep(min(args.seconds, 3.0))
            s1 = await bench.stats(session, reset=True, probe="stop")
            result["samples_while_nobody_listens"] = s1["samples"] - s0["samples"]

            # Phase 2: one panel open at the default period.
            stop = asyncio.Event()
            one = asyncio.ensure_future(bench.stream_client(session, stop))
            await asyncio.sleep(args.period)
            result["cpu_one_listener_percent"] = round(await cpu_percent_async(server, args.seconds), 3)
            stop.set()
            await one
            result["idle_cpu_added_percent"] = round(
                result["cpu_one_listener_percent"] - result["cpu_idle_no_listener_percent"], 3
            )

            # Phase 3: many clients.
            s2 = await bench.stats(session, reset=True, probe="start")
            bench.events = 0
            stop = asyncio.Event()
            clients = [asyncio.ensure_future(bench.stream_client(session, stop)) for _ in range(args.clients)]
            await asyncio.sleep(args.seconds)
            s3 = await bench.stats(session)
            stop.set()
            await asyncio.gather(*clients, return_exceptions=True)
            samples = max(1, s3["samples"] - s2["samples"])
            result.update(
                {
                    "samples_taken": s3["samples"] - s2["samples"],
                    "events_delivered": bench.events,
                    "requests_per_sample": round(bench.events / samples, 2),
                    "sample_p99_ms": s3["sample_p99_ms"],
                    "sample_p50_ms": s3["sample_p50_ms"],
                    "process_sample_p99_ms": s3["process_sample_p99_ms"],
                    "sampler_loop_work_p99_ms": s3["sampler_loop_work_p99_ms"],
                    "event_loop_lag_p99_ms": s3["event_loop_lag_p99_ms"],
                    "event_loop_lag_p50_ms": s3["event_loop_lag_p50_ms"],
                    "event_loop_lag_idle_p99_ms": s1["event_loop_lag_p99_ms"],
                }
            )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    result["cpu_count"] = os.cpu_count()
    # CPU times count clock ticks: below this, a phase reads as 0.
    result["cpu_resolution_percent"] = round(100.0 / os.sysconf("SC_CLK_TCK") / args.seconds, 3)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuburst bench telemetry", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        choices=["auto", "nvml", "simulated"],
        default="auto",
        help="'auto': NVML when it initialises, else simulated (default)",
    )
    parser.add_argument("--clients", type=int, default=50, help="concurrent stream clients in phase 3 (default 50)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase (default 10)")
    parser.add_argument(
        "--period", type=float, default=1.0, help="sampling period in seconds (default 1.0, the default)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.period <= 0:
        parser.error("--clients must be >= 1, --seconds and --period positive")
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
