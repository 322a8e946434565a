"""`gpuburst bench telemetry` runs end to end and reports the figures the issue names."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_telemetry_smoke():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_gpuburst.cli",
            "bench",
            "telemetry",
            "--json",
            "--backend",
            "simulated",
            "--clients",
            "5",
            "--seconds",
            "0.6",
            "--period",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["backend"] == "simulated" and result["gpus"] == 1 and result["available"] is True
    assert result["samples_while_nobody_listens"] == 0  # paused without listeners
    assert result["samples_taken"] >= 2
    # Five clients share every sample: deliveries per backend sample close to the client count.
    assert 3 <= result["requests_per_sample"] <= 7
    for key in ("sample_p99_ms", "event_loop_lag_p99_ms", "idle_cpu_added_percent"):
        assert isinstance(result[key], (int, float)), key
    assert result["sample_p99_ms"] < 50
