"""`gpuburst bench culling` at small scale, and its checks' ability to fail."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import culling


@pytest.mark.integration
@pytest.mark.timeout(240)
async def test_culling_benchmark_small(tmp_path):
    result = await culling.run(rounds=1, servers=1, timeout=14.0, warning=4.0, period=1.0, seed=3, state_dir=tmp_path)
    assert result["failures"] == []
    assert result["idle_servers"] == result["stopped"] == result["warned_first"] == 1
    assert result["computing_stopped"] == 0
    assert result["lag_s"]["n"] == 1 and result["lag_s"]["min"] >= -culling.EARLY_S
    assert result["bound_s"] == result["sample_s"] + culling.READING_S + culling.SLACK_S
    # how late is timing, and this machine's load decides it: the benchmark's check, not this test's
    assert set(result["checks"]) == {
        "every_idle_server_stopped",
        "every_stop_warned_first",
        "never_before_timeout",
        "within_one_sample_and_reading",
        "no_computing_server_stopped",
        "no_failures",
    }


def test_each_check_can_fail():
    good = {
        "idle_servers": 4,
        "stopped": 4,
        "warned_first": 4,
        "computing_stopped": 0,
        "bound_s": 4.0,
        "lag_s": {"n": 4, "min": 0.3, "max": 3.0},
        "failures": [],
    }
    assert all(culling.checks(good).values())
    bad = {
        "every_idle_server_stopped": {"stopped": 3},
        "every_stop_warned_first": {"warned_first": 3},
        "never_before_timeout": {"lag_s": {"n": 4, "min": -1.0, "max": 3.0}},
        "within_one_sample_and_reading": {"lag_s": {"n": 4, "min": 0.3, "max": 4.5}},
        "no_computing_server_stopped": {"computing_stopped": 1},
        "no_failures": {"failures": ["r0-idle0's cell: {}"]},
    }
    for name, change in bad.items():
        assert not culling.checks({**good, **change})[name], name


def test_warned_before_stop_reads_the_order_of_the_hubs_lines():
    log = "GPU culling: warning r0-idle1: server stops\nGPU culling: stopping r0-idle1's server ''\n"
    assert culling.warned_before_stop(log, "r0-idle1")
    assert not culling.warned_before_stop("GPU culling: stopping r0-idle1's server ''\nGPU culling: warning r0-idle1: x", "r0-idle1")
    assert not culling.warned_before_stop(log, "r0-idle")  # another user's lines are not this one's
