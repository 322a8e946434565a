"""`gpuburst bench telemetry` runs end to end and reports the figures benchmarks/README.md names."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from helpers.processes import alive

from jupyter_gpuburst.bench.telemetry import cpu_layout

# A guard against a hang: the run below takes 21 s on an idle 2-core machine, 56 s at a load of 8
# there, 96 s at 14 and in a fresh clone's whole suite.
SMOKE_TIMEOUT_S = 240


def test_bench_telemetry_smoke():
    started = time.monotonic()
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_gpuburst.cli",
                "bench",
                "telemetry",
                "--json",
                "--gpus",
                "2",
                "--kernels",
                "3",
                "--samples",
                "50",
                "--clients",
                "5",
                "--churn",
                "2",
                "--rounds",
                "1",
                "--seconds",
                "3",
                "--block",
                "1.5",
                "--status-rate",
                "20",
                "--cpu-seconds",
                "0.5",
                "--period",
                "0.1",
            ],
            capture_output=True,
            text=True,
            timeout=SMOKE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"bench telemetry ran over {SMOKE_TIMEOUT_S} s; the end of its stderr:\n{stderr[-3000:]}")
    assert out.stdout.strip(), (
        f"bench telemetry printed no result (exit {out.returncode}, {time.monotonic() - started:.0f} s):\n{out.stderr[-3000:]}"
    )
    result = json.loads(out.stdout)
    # the exit status follows the checks (a small run cannot have 1,000 samples: it fails those)
    assert out.returncode == (0 if result["ok"] else 1)
    assert result["checks"]["cycle_samples_enough"] is False
    cycle = result["cycle"]
    assert cycle["cycle_ms"]["n"] == cycle["cycle_with_processes_ms"]["n"] == 50
    assert cycle["kernels_attributed"] == 3
    server = result["server"]
    assert server["backend"] == "simulated" and server["gpus"] == 2 and server["kernels"] == 3
    first = server["rounds_detail"][0]
    # two cycles of blocks, the second in the rotated order
    assert first["order"] == "ABC BCA" and server["cycles_per_round"] == 2 and server["block_s"] == 1.5
    a, b, c = first["A"], first["B"], first["C"]
    assert a["blocks"] == b["blocks"] == c["blocks"] == 2 and [blk[0] for blk in b["per_block"]] == [0, 1]
    assert a["samples"] == 0  # nobody listens in A: the sampler is paused
    assert b["samples"] >= 5 and b["swaps"] >= 1
    # the floor's clients read frames of their own: the sampler stays paused, as in A
    assert c["samples"] == 0 and c["swaps"] >= 1 and c["samples_per_connected_period"] > 0
    assert server["stream_errors"] == 0
    # connected clients get samples, at most about one per period: shared, not one per request.
    # How close to one it comes is the benchmark's own check (every_client_got_samples): a
    # loaded machine delays the server's ticks (0.25 a period beside the whole suite on 2 cores),
    # which no sharing or request can make faster than the period.
    assert 0 < server["samples_per_connected_period_min"] <= 1.5
    assert server["lag_ms_with_clients"]["n"] > 100 and server["lag_ms_with_clients"]["max"] is not None
    for phase in ("without_clients", "with_clients", "floor"):
        lag, less = server[f"lag_ms_{phase}"], server[f"lag_ms_less_cpu_wait_{phase}"]
        if less["n"]:  # where Linux keeps scheduler statistics per thread: one wait per lag
            assert less["n"] == lag["n"] == server[f"cpu_wait_ms_{phase}"]["n"] and less["max"] <= lag["max"]
            split = server[f"lag_max_split_{phase}"]
            assert split["lag_ms"] == lag["max"]
            assert split["cpu_wait_ms"] + split["less_cpu_wait_ms"] == pytest.approx(split["lag_ms"], abs=1e-3)
    # the slowest status calls of each window were laid over the server's timeline
    for window in (a, b, c):
        overlapped = window["slowest_status_overlapped"]
        assert overlapped["calls"] == max(1, -(-window["status_ms"]["n"] * 25 // 1000))
        assert 0 <= overlapped["overlapping_nothing"] <= overlapped["calls"]
        assert all(0 < e["calls"] <= overlapped["calls"] for e in overlapped["by_what"].values())
    # pooled over the rounds (one here)
    assert server["slowest_status_overlapped_with_clients"]["calls"] == b["slowest_status_overlapped"]["calls"]
    assert server["status_ms_without_clients"]["n"] >= 20 and server["status_p99_ratio"]["median"] > 0
    assert server["status_ms_floor"]["n"] >= 20
    # every call counted for one block only: about a block's seconds times the rate each
    assert server["status_ms_without_clients"]["n"] <= 2 * 1.5 * 20 + 2
    assert server["status_p99_ratio"]["pooled"] > 0 and server["status_p99_ratio_null"]["pooled"] > 0
    assert server["status_p99_ratio_null"]["n"][0] > 0 and server["status_p99_ratio_null"]["n"][1] > 0
    if server["status_wire_ms_without_clients"]["n"]:  # where the kernel gives receive timestamps
        assert server["status_wire_ms_without_clients"]["p50"] <= server["status_ms_without_clients"]["p50"]
    assert server["status_p99_ratio_floor"]["median"] > 0 and server["status_p99_ratio_over_floor"]["median"] > 0
    assert server["slowest_status_overlapped_floor"]["calls"] == c["slowest_status_overlapped"]["calls"]
    if len(os.sched_getaffinity(0)) >= 2:
        # the load generator never runs on the server's CPU
        layout = server["cpu_layout"]
        assert layout["server"] and not set(layout["server"]) & (set(layout["clients"]) | set(layout["status_probe"]))


def test_a_benchmark_killed_outright_leaves_no_server_or_kernel_behind():
    """SIGKILL, as a test's timeout sends it, gives the benchmark no chance to stop what it
    started: its server and the server's stand-in kernels end by themselves."""
    kernels = 3
    argv = [sys.executable, "-m", "jupyter_gpuburst.cli", "bench", "telemetry", "--json", "--kernels", str(kernels)]
    argv += ["--samples", "5", "--clients", "1", "--rounds", "1", "--seconds", "600", "--no-pin"]
    bench = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not started and time.monotonic() < deadline and bench.poll() is None:
            try:
                servers = [p for p in psutil.Process(bench.pid).children() if "telemetry_server" in " ".join(p.cmdline())]
                # the server's stand-ins: each a shell with a child of its own
                if servers and len(shells := servers[0].children()) >= kernels and all(shell.children() for shell in shells):
                    started = [servers[0], *servers[0].children(recursive=True)]
            except psutil.Error:  # a process that ended while being read
                pass
            time.sleep(0.2)
        assert started, f"the benchmark's server and its {kernels} stand-in kernels never ran (exit {bench.poll()})"
        bench.kill()
        bench.wait()
        deadline = time.monotonic() + 60  # the server's own stop, on a loaded machine
        while (left := [p for p in started if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running once the benchmark was killed: {[p.pid for p in left]}"
    finally:
        bench.kill()
        bench.wait()
        for p in started:
            with contextlib.suppress(psutil.Error):
                p.kill()


def test_cpu_layout_keeps_the_server_apart_or_pins_nothing():
    cpus = sorted(os.sched_getaffinity(0))
    assert cpu_layout(pin=False) is None
    layout = cpu_layout(pin=True)
    if len(cpus) < 2:
        assert layout is None
        return
    assert set(layout["server"]) | set(layout["clients"]) | set(layout["status_probe"]) <= set(cpus)
    assert not set(layout["server"]) & set(layout["clients"])
    assert not set(layout["server"]) & set(layout["status_probe"])
