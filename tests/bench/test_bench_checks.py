"""The benchmarks' JSON and checks: small runs for the shape, bad inputs to see each check fail.

Longer than 600 lines: 40 short tests, each making one benchmark's check fail on the input
meant to fail it; one file, so that a check without such a test is seen beside the others."""

from __future__ import annotations

import copy

import pytest

from jupyter_gpuburst.bench import kernels, redirect, spawn, telemetry, telemetry_figures, trace
from jupyter_gpuburst.bench.stats import summary
from jupyter_gpuburst.bench.trace_model import HOUR, Session, TraceParams, generate

SMALL = TraceParams(students=40, weeks=2, seed=7)


def small_federation(local: int = 8, donor: int = 32) -> trace.Federation:
    return trace.Federation(local_gpus=local, donor_gpus=(("donor-a", donor // 2), ("donor-b", donor - donor // 2)))


# ---- stats ------------------------------------------------------------------------------------
def test_summary_reports_p99_9_only_with_1000_samples():
    assert summary([0.001] * 999, scale=1000)["p99_9"] is None
    full = summary([i / 1000 for i in range(1000)], scale=1000)
    assert full["n"] == 1000 and full["p99_9"] == 998.0 and full["max"] == 999.0 and full["p50"] == 499.0


# ---- trace ------------------------------------------------------------------------------------
def test_trace_is_deterministic_for_a_seed():
    assert generate(SMALL) == generate(SMALL)
    assert generate(SMALL) != generate(TraceParams(students=40, weeks=2, seed=8))


def test_trace_keeps_one_server_per_student():
    sessions = generate(SMALL)
    ends: dict[str, float] = {}
    for s in sessions:
        assert s.start >= ends.get(s.user, float("-inf"))
        ends[s.user] = s.start + s.length


def test_trace_study_json_shape_and_checks_pass_when_donors_suffice():
    result, series = trace.run_study(SMALL, small_federation(), ["server", "kernel"], list(trace.POLICIES))
    assert set(result["results"]) == {f"{m}/{p}" for m in ("server", "kernel") for p in trace.POLICIES}
    for r in result["results"].values():
        assert r["placed"] + r["refused"] == r["requests"]
        assert r["wait_s"]["n"] == r["requests"]
        assert r["overcommitted"] == 0
        assert set(r["gpu_hours_borrowed"]) == {"donor-a", "donor-b"}
    assert result["results"]["server/local-only"]["gpu_hours_borrowed"] == {"donor-a": 0.0, "donor-b": 0.0}
    assert result["results"]["server/local-only"]["refused"] > 0
    assert result["checks"] == {
        "no_overcommit": True,
        "kernel_burst_cuts_p95_wait_10x": True,
        "kernel_burst_refuses_none": True,
        "server_burst_cuts_p95_wait_10x": True,
        "server_burst_refuses_none": True,
    }
    # kernel mode holds GPUs for less time per computing hour than server mode
    assert (
        result["results"]["kernel/local-first"]["held_per_active_gpu_hour"]
        < result["results"]["server/local-first"]["held_per_active_gpu_hour"]
    )
    assert len(series["server/local-first"]["in_use"]["origin"]) >= 2 * 7 * 24


def test_trace_checks_fail_when_donors_are_too_small():
    """Deliberately bad input: 2 donor GPUs cannot absorb a lab, so burst refuses and waits."""
    result, _ = trace.run_study(SMALL, small_federation(local=8, donor=2), ["server"], ["local-only", "local-first"])
    assert result["checks"]["server_burst_refuses_none"] is False
    assert result["checks"]["server_burst_cuts_p95_wait_10x"] is False
    assert result["ok"] is False


def test_trace_overcommit_check_fails_on_an_overcommitted_result():
    result, _ = trace.run_study(SMALL, small_federation(), ["server"], ["local-first"])
    bad = copy.deepcopy(result)
    bad["results"]["server/local-first"]["overcommitted"] = 1
    assert trace.checks(bad)["no_overcommit"] is False


def test_kernel_mode_merges_close_busy_periods_and_releases_after_the_last():
    s = Session(0, "u", 1000.0, 3600.0, 1, 4.0, busy=((0.0, 60.0), (100.0, 60.0), (1000.0, 30.0)))
    demands = trace.KernelMode(release_s=120.0).demands(s, 5)
    assert [(d.did, d.start, d.hold, d.active) for d in demands] == [
        (5, 1000.0, 280.0, 120.0),  # 0-160 merged (gap 40 < 120), held until 160 + 120
        (6, 2000.0, 150.0, 30.0),
    ]
    whole = trace.ServerMode().demands(s, 0)
    assert [(d.start, d.hold, d.active) for d in whole] == [(1000.0, 3600.0, 150.0)]


def test_hour_series_splits_a_value_across_hours():
    h = trace.HourSeries(3)
    h.set(0.5 * HOUR, 2.0)
    h.set(1.5 * HOUR, 0.0)
    h.advance(3 * HOUR)
    assert h.bins == [1.0, 1.0, 0.0]


def test_trace_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from jupyter_gpuburst.bench import plots

    result, series = trace.run_study(SMALL, small_federation(), ["server", "kernel"], ["local-only", "local-first"])
    paths = plots.write_all(tmp_path, result, series, week=1)
    assert {p.name for p in paths} == {
        "trace-wait-cdf.png",
        "trace-refused.png",
        "trace-gpus-in-use.png",
        "trace-idle-memory.png",
        "trace-borrowed.png",
        "trace-held-per-active.png",
    }
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_trace_cli_refuses_bad_options(capsys):
    with pytest.raises(SystemExit) as exc:
        trace.main(["--policies", "fastest"])
    assert exc.value.code == 2
    assert "unknown mode or policy: fastest" in capsys.readouterr().err


# ---- spawn ------------------------------------------------------------------------------------
def spawn_result(**changes) -> dict:
    phase = {"spawner": spawn.GPUBURST, "requested": 3, "ready": 3, "failed_scheduling": 0, "redirects": 0}
    base = {**phase, "spawner": spawn.BASELINE}
    result = {
        "phases": [base, phase] * 3,
        "p95_ratio": {"median": 1.01, "order_balanced": True, "by_order": {"order_cancelled": 1.02}},
        "extra_api_reads_per_spawn": 0.0,
    }
    result.update(changes)
    return result


def test_spawn_checks_pass_on_a_good_result():
    assert all(spawn.checks(spawn_result()).values())


def test_spawn_ratio_by_order_splits_the_rounds_each_spawner_ran_first():
    # AB rounds are the even ones, BA the odd ones; a missing ratio is left out
    # the order's effect cancels: A-first rounds at r / k, B-first ones at r * k give back r
    assert spawn.by_order([0.9, 1.1, 0.92, 1.12, None, 1.08]) == {"AB": 0.91, "BA": 1.1, "order_cancelled": 1.0}
    assert spawn.by_order([1.0]) == {"AB": 1.0, "BA": None, "order_cancelled": None}


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"ready": 2}, "all_ready"),
        ({"failed_scheduling": 1}, "no_failed_scheduling_of_pinned_pods"),
        ({"redirects": 1}, "no_redirects"),
    ],
)
def test_spawn_checks_fail_on_a_bad_phase(change, check):
    result = spawn_result()
    result["phases"][3] = {**result["phases"][3], **change}
    assert spawn.checks(result)[check] is False


def test_spawn_checks_fail_on_ratio_and_reads():
    def ratio(median, cancelled=1.0, balanced=True):
        return spawn_result(p95_ratio={"median": median, "order_balanced": balanced, "by_order": {"order_cancelled": cancelled}})

    assert spawn.checks(ratio(1.2))["p95_ratio_within_goal"] is False
    assert spawn.checks(ratio(None))["p95_ratio_within_goal"] is False
    # a good median, but with the order's effect taken out the ratio is over the goal
    assert spawn.checks(ratio(1.01, cancelled=1.07))["p95_ratio_within_goal"] is False
    assert spawn.checks(ratio(1.01, cancelled=None))["p95_ratio_within_goal"] is False
    # a good median over an odd number of rounds: one spawner went first once more often
    assert spawn.checks(ratio(1.01, balanced=False))["p95_ratio_within_goal"] is False
    assert spawn.checks(spawn_result(extra_api_reads_per_spawn=1.0))["no_extra_api_reads"] is False
    assert spawn.checks(spawn_result(extra_api_reads_per_spawn=0.01))["no_extra_api_reads"] is True


def test_spawn_baseline_profile_is_the_gpu_profile_with_the_liqo_toleration():
    from jupyter_gpuburst.core import liqo

    override = spawn.GPU_PROFILE["kubespawner_override"]
    assert override["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    assert override["tolerations"] == [liqo.virtual_node_toleration()]
    assert spawn.PROFILES == [spawn.GPU_PROFILE]


# ---- redirect ---------------------------------------------------------------------------------
def test_redirect_modes_split_a_two_mode_distribution():
    values = [0.010, 0.011, 0.012, 0.010, 0.150, 0.190, 0.170]
    modes = redirect.modes(values)
    assert [m["n"] for m in modes] == [4, 3]
    assert modes[0]["max"] == 0.012 and modes[1]["min"] == 0.15


def test_redirect_modes_keep_one_mode_when_values_are_spread_evenly():
    assert [m["n"] for m in redirect.modes([0.01, 0.02, 0.03, 0.04, 0.05])] == [5]


def test_redirect_checks_fail_on_bad_results():
    good = {"runs": 3, "redirected": 3, "ready": 3, "redirects_metric": 3, "redirect_s": redirect.distribution([0.1, 0.2, 0.3])}
    assert all(redirect.checks(good).values())
    assert redirect.checks({**good, "redirected": 2})["all_redirected"] is False
    assert redirect.checks({**good, "ready": 2})["all_ready"] is False
    assert redirect.checks({**good, "redirects_metric": 4})["redirects_counted_by_hub"] is False
    slow = {**good, "redirect_s": redirect.distribution([0.1, 2.5])}
    assert redirect.checks(slow)["redirect_max_within_goal"] is False
    assert redirect.checks({**good, "redirect_s": redirect.distribution([])})["redirect_max_within_goal"] is False


# ---- kernels ----------------------------------------------------------------------------------
KERNELS_GOOD = {
    "gpus": 6,
    "concurrent": 10,
    "running": 6,
    "refused_no_capacity": 4,
    "failed": 0,
    "double_bookings_api_server": 0,
    "double_bookings_ledger": 0,
}


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"double_bookings_api_server": 1}, "no_double_booking_api_server"),
        ({"double_bookings_ledger": 1}, "no_double_booking_ledger"),
        ({"failed": 1, "refused_no_capacity": 3}, "no_failed_start"),
        # a GPU left idle while a request was refused
        ({"running": 5, "refused_no_capacity": 5}, "every_gpu_used"),
        ({"running": 5, "refused_no_capacity": 5}, "refused_only_beyond_capacity"),
        # fewer requests than GPUs: nobody may be refused
        ({"concurrent": 4, "running": 3, "refused_no_capacity": 1}, "refused_only_beyond_capacity"),
    ],
)
def test_kernels_checks_fail_on_bad_results(change, check):
    assert all(kernels.checks(KERNELS_GOOD).values())
    assert all(kernels.checks({**KERNELS_GOOD, "concurrent": 4, "running": 4, "refused_no_capacity": 0}).values())
    assert kernels.checks({**KERNELS_GOOD, **change})[check] is False


def test_the_kernels_federation_holds_exactly_the_gpus_asked_for():
    for gpus in (2, 6, 7, 18, 40, 50):
        config = kernels.federation(gpus, concurrent=10)
        origin = sum(n.resources.get(kernels.GPU, 0) * n.count for n in config.origin.nodes)
        [donor] = config.donors
        on_donor = sum(n.resources.get(kernels.GPU, 0) * n.count for n in donor.cluster.nodes)
        assert origin + on_donor == gpus and int(donor.grant[kernels.GPU]) == on_donor


# ---- telemetry --------------------------------------------------------------------------------
async def test_telemetry_cycle_times_the_whole_cycle():
    cycle = await telemetry.measure_cycle(gpus=2, kernels=3, samples=30)
    assert cycle["kernels_attributed"] == 3
    assert cycle["cycle_ms"]["n"] == 30
    # every timed cycle re-read processes: the process read is part of what is timed
    assert cycle["cycle_with_processes_ms"]["n"] == 30
    assert cycle["cycle_ms"]["p50"] >= cycle["device_read_ms"]["p50"] > 0
    assert cycle["sample_bytes"] > 0


async def test_telemetry_cycle_on_nvml_without_a_gpu_says_why():
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works here: the GPU tier times the real cycle")
    with pytest.raises(SystemExit, match="nvml: .*NVIDIA"):
        await telemetry.measure_cycle(gpus=1, kernels=1, samples=5, backend_name="nvml")


def test_telemetry_attribution_is_checked_only_where_the_kernels_hold_simulated_gpus():
    result = telemetry_result()
    result["cycle"]["kernels_attributed"] = 0
    assert telemetry.checks(result)["all_kernels_attributed"] is False
    result["cycle"]["backend"] = "nvml"  # stand-in kernels hold no real GPU
    assert "all_kernels_attributed" not in telemetry.checks(result)


def telemetry_result() -> dict:
    ok_tail = {"n": 5000, "p50": 0.1, "p99": 1.0, "p99_9": 2.0, "max": 3.0}
    return {
        "cycle": {"kernels": 50, "kernels_attributed": 50, "cycle_ms": {**ok_tail}},
        "server": {
            "lag_ms_with_clients": {**ok_tail},
            "lag_ms_without_clients": {**ok_tail},
            "status_ms_with_clients": {**ok_tail},
            "status_ms_without_clients": {**ok_tail},
            "status_ms_floor": {**ok_tail},
            "status_p99_ratio": {"median": 1.05, "pooled": 1.05},
            "status_p99_ratio_over_floor": {"median": 1.0, "pooled": 1.0},
            "status_p99_ratio_null": {"pooled": 0.97},
            "stream_errors": 0,
            "clients_without_samples": 0,
            "samples_per_connected_period_min": 0.97,
        },
    }


def test_telemetry_checks_pass_on_a_good_result():
    assert all(telemetry.checks(telemetry_result()).values())


@pytest.mark.parametrize(
    ("path", "value", "check"),
    [
        (("cycle", "cycle_ms", "p99"), 6.0, "cycle_p99_within_goal"),
        (("cycle", "cycle_ms", "n"), 999, "cycle_samples_enough"),
        (("cycle", "kernels_attributed"), 49, "all_kernels_attributed"),
        (("server", "lag_ms_with_clients", "max"), 5.1, "lag_max_within_goal"),
        (("server", "lag_ms_with_clients", "n"), 10, "lag_samples_enough"),
        (("server", "lag_ms_without_clients", "max"), 150.0, "baseline_undisturbed"),
        (("server", "status_ms_without_clients", "n"), 10, "status_samples_enough"),
        (("server", "status_ms_floor", "n"), 10, "status_samples_enough"),
        (("server", "status_p99_ratio", "pooled"), 1.2, "status_p99_ratio_within_goal"),
        (("server", "status_p99_ratio_over_floor", "pooled"), 1.2, "status_p99_within_goal_of_floor"),
        (("server", "status_p99_ratio_over_floor", "pooled"), None, "status_p99_within_goal_of_floor"),
        (("server", "status_p99_ratio_null", "pooled"), 1.11, "status_baseline_repeatable"),
        (("server", "status_p99_ratio_null", "pooled"), 0.9, "status_baseline_repeatable"),
        (("server", "status_p99_ratio_null", "pooled"), None, "status_baseline_repeatable"),
        (("server", "stream_errors"), 1, "streams_without_errors"),
        (("server", "clients_without_samples"), 1, "every_client_got_samples"),
        (("server", "samples_per_connected_period_min"), 0.5, "every_client_got_samples"),
    ],
)
def test_telemetry_checks_fail_on_bad_values(path, value, check):
    result = telemetry_result()
    target = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert telemetry.checks(result)[check] is False


def test_slowest_status_calls_are_laid_over_the_servers_timeline():
    # 40 calls of 1 ms every 10 ms; the slowest 2.5 % are the one slow call
    calls = [(i * 0.010, 0.001) for i in range(40)]
    calls[5] = (0.050, 0.004)
    timeline = [
        [0.0505, 0.002, "RequestHandler._execute (StreamHandler)"],  # inside the slow call
        [0.0510, 0.001, "RequestHandler._execute (APIStatusHandler, first step)"],  # the call's own
        [0.0490, 0.0012, "sampler worker cycle"],  # began before it, still running when it came
        [0.2000, 0.0050, "collection of generation 1"],  # during a fast call only
    ]
    result = telemetry_figures.slowest_status_overlapped(calls, timeline)
    assert result["calls"] == 1 and result["slower_than_ms"] == 4.0
    assert result["overlapping_nothing"] == 0
    assert result["by_what"] == {
        "RequestHandler._execute (StreamHandler)": {"calls": 1, "overlap_ms": 2.0},
        "sampler worker cycle": {"calls": 1, "overlap_ms": 0.2},
    }
    # with nothing else on the loop, the slow call is counted as slowed outside it
    alone = telemetry_figures.slowest_status_overlapped(calls, timeline[1:2])
    assert alone["overlapping_nothing"] == 1 and alone["by_what"] == {}
    assert telemetry_figures.slowest_status_overlapped([], timeline)["calls"] == 0


def test_phases_rotate_so_each_runs_in_every_position():
    orders = [telemetry.phase_order(i) for i in range(6)]
    assert orders[:3] == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"]] and orders[3:] == orders[:3]
    for position in range(3):
        assert sorted(order[position] for order in orders[:3]) == ["A", "B", "C"]


def test_p99_ratios_are_taken_round_by_round():
    def window(p99):
        return {"status_ms": {"p99": p99}}

    rounds = [
        {"A": window(2.0), "B": window(2.4), "C": window(2.2)},
        {"A": window(1.0), "B": window(1.0), "C": window(0.8)},
        {"A": window(2.0), "B": window(None), "C": window(2.0)},
    ]  # a window without calls is left out
    assert telemetry_figures.p99_ratios(rounds, "B", "A") == {"per_round": [1.2, 1.0], "median": 1.1, "min": 1.0, "max": 1.2}
    assert telemetry_figures.p99_ratios(rounds, "C", "A")["per_round"] == [1.1, 0.8, 1.0]
    assert telemetry_figures.p99_ratios(rounds[2:], "B", "C") == {"per_round": [], "median": None, "min": None, "max": None}


def test_pooled_ratio_takes_every_call_of_each_side():
    under = [0.001] * 99 + [0.002]  # p99 (nearest rank) 1 ms
    over = [0.001] * 98 + [0.0015, 0.003]  # p99 1.5 ms
    assert telemetry_figures.pooled_p99_ratio(over, under) == 1.5
    assert telemetry_figures.pooled_p99_ratio([], under) is None and telemetry_figures.pooled_p99_ratio(over, []) is None


def test_the_ratio_interval_comes_from_whole_cycles_drawn_again():
    import random

    draw = random.Random(1)
    under = [[draw.uniform(0.4, 1.0) for _ in range(200)] for _ in range(12)]
    same = [[draw.uniform(0.4, 1.0) for _ in range(200)] for _ in range(12)]
    low, high = telemetry_figures.bootstrap_p99_ratio(same, under, resamples=200)
    assert low <= 1.0 <= high and high - low < 0.1
    double = [[2 * v for v in cycle] for cycle in under]
    assert telemetry_figures.bootstrap_p99_ratio(double, under, resamples=50) == [2.0, 2.0]  # paired cycles
    # one cycle of slow calls, only in over: the interval widens to take it in or leave it out
    episode = [list(cycle) for cycle in same]
    episode[3] = [3 * v for v in episode[3]]
    low, high = telemetry_figures.bootstrap_p99_ratio(episode, under, resamples=200)
    assert low < 1.2 and high > 1.5
    assert telemetry_figures.bootstrap_p99_ratio([[1.0]], [[1.0]]) is None  # one cycle: nothing to draw from


def test_a_block_keeps_the_calls_that_started_in_it():
    calls = [(0.9, 0.2, None), (1.0, 0.001, 0.0009), (1.5, 0.7, 0.6), (2.0, 0.001, None)]
    # a call counts for the block it started in, however long it took; the end is open
    assert telemetry_figures.calls_within(calls, 1.0, 2.0) == calls[1:3]
    assert telemetry_figures.calls_within(calls, 3.0, 4.0) == []


def test_blocks_split_each_phases_seconds_evenly():
    assert telemetry.cycles_per_round(16, 4) == 4
    assert telemetry.cycles_per_round(1.5, 4) == 1  # at least one block
    assert telemetry.cycles_per_round(12, 5) == 2


def test_what_ran_pools_over_blocks():
    one = {"slow_callbacks": [{"ms": 3.0, "what": "a"}], "gc": {"0": {"n": 2, "max_ms": 0.4, "total_ms": 0.7}}}
    two = {
        "slow_callbacks": [{"ms": 5.0, "what": "b"}, {"ms": 2.0, "what": "c"}],
        "gc": {"0": {"n": 1, "max_ms": 0.5, "total_ms": 0.5}, "1": {"n": 1, "max_ms": 1.5, "total_ms": 1.5}},
    }
    pooled = telemetry_figures.merge_what_ran([one, two], keep=2)
    assert [s["what"] for s in pooled["slow_callbacks"]] == ["b", "a"]
    assert pooled["gc"] == {"0": {"n": 3, "max_ms": 0.5, "total_ms": 1.2}, "1": {"n": 1, "max_ms": 1.5, "total_ms": 1.5}}


def test_a_lag_less_its_cpu_wait_is_what_the_loop_itself_held():
    lags = [0.0002, 0.004, 0.003]
    waits = [0.0005, 0.0038, 0.0]  # a wait longer than its lag: the tick's sleep took it in
    assert telemetry_figures.lags_less_cpu_wait(lags, waits) == pytest.approx([0.0, 0.0002, 0.003])
    # a server that reported no waits (not Linux): nothing to pair, no figure
    assert telemetry_figures.lags_less_cpu_wait(lags, []) == []


def test_the_largest_lag_is_split_into_its_cpu_wait_and_the_rest():
    split = telemetry_figures.lag_max_split([0.001, 0.0048, 0.002], [0.0, 0.0041, 0.002])
    assert split == {"lag_ms": 4.8, "cpu_wait_ms": 4.1, "less_cpu_wait_ms": pytest.approx(0.7)}
    # a wait longer than the lag it came with counts up to the lag
    assert telemetry_figures.lag_max_split([0.003], [0.004])["less_cpu_wait_ms"] == 0
    assert telemetry_figures.lag_max_split([0.003], []) is None and telemetry_figures.lag_max_split([], []) is None


def test_overlaps_pool_over_windows():
    one = {"calls": 30, "overlapping_nothing": 20, "by_what": {"a": {"calls": 4, "overlap_ms": 1.0}}}
    two = {"calls": 30, "overlapping_nothing": 25, "by_what": {"a": {"calls": 1, "overlap_ms": 0.5}, "b": {"calls": 3, "overlap_ms": 2.0}}}
    pooled = telemetry_figures.pooled_overlaps([one, two])
    assert pooled["calls"] == 60 and pooled["overlapping_nothing"] == 45
    assert list(pooled["by_what"].items()) == [("a", {"calls": 5, "overlap_ms": 1.5}), ("b", {"calls": 3, "overlap_ms": 2.0})]


# ---- the telemetry server's lag recorder ---------------------------------------------------------
def test_lag_probe_pairs_each_lag_with_the_cpu_wait_the_os_gave_its_thread():
    import asyncio
    import os
    import subprocess
    import sys
    import time as _time

    from jupyter_gpuburst.bench.telemetry_server import CPU_WAIT, TIMELINE_MIN_S, LagProbe, WhatRan, open_run_delay

    fd = open_run_delay()
    if fd is None:
        pytest.skip("this kernel keeps no scheduler statistics per thread")
    os.close(fd)
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    # a busy process on the loop thread's one CPU: while the loop computes, the two share that CPU
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    recorder = WhatRan()

    async def measure() -> LagProbe:
        probe = LagProbe(recorder)
        probe.start()
        await asyncio.sleep(0.02)
        started = _time.thread_time()
        while _time.thread_time() - started < 0.05:  # 50 ms of the loop's own work, in one step
            pass
        await asyncio.sleep(0.02)
        # on a loaded machine the 1 ms ticks come late, and 40 ms may hold fewer than the count
        # asserted below: the probe runs until it has them
        deadline = _time.monotonic() + 10
        while len(probe.lags) <= 10 and _time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        probe.stop()
        await asyncio.sleep(0)
        return probe

    try:
        os.sched_setaffinity(rival.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        _time.sleep(0.05)  # the rival is running
        probe = asyncio.run(measure())
    finally:
        os.sched_setaffinity(0, allowed)
        rival.kill()
        rival.wait()
    assert len(probe.waits) == len(probe.lags) > 10 and min(probe.waits) >= 0
    worst = max(range(len(probe.lags)), key=probe.lags.__getitem__)
    # the step's lag holds its 50 ms of work and the time the rival had the CPU meanwhile
    assert probe.lags[worst] >= 0.05 and probe.waits[worst] >= 0.005
    assert telemetry_figures.lags_less_cpu_wait(probe.lags, probe.waits)[worst] >= 0.045
    # the waits long enough to slow a status call are on the timeline the slowest calls are laid over
    waits = [step for step in recorder.timeline if step[2] == CPU_WAIT]
    assert waits and all(step[1] >= TIMELINE_MIN_S for step in waits)
    assert max(step[1] for step in waits) == pytest.approx(max(probe.waits))


async def test_what_ran_names_the_slow_coroutine_and_the_collector():
    import asyncio
    import gc
    import time as _time

    from jupyter_gpuburst.bench.telemetry_server import WhatRan

    # far apart: on a loaded machine a fast step may be preempted for a few ms and pass a 5 ms
    # threshold, but not 100 ms
    class Handler:
        async def get(self):
            _time.sleep(0.2)  # holds the loop for 200 ms
            await asyncio.sleep(0)

    recorder = WhatRan(threshold_s=0.1)
    recorder.install()
    try:
        await asyncio.ensure_future(Handler().get())
        await asyncio.sleep(0)  # a fast callback: not recorded
        gc.collect()
    finally:
        recorder.uninstall()
    report = recorder.report()
    # the timeline has the step and the collection, on the clock the status probe uses
    names = [what for _, _, what in recorder.timeline]
    assert any(n.endswith("get (Handler)") for n in names) and "collection of generation 2" in names
    step = next(t for t in recorder.timeline if t[2].endswith("get (Handler)"))
    assert step[1] >= 0.1 and step[0] <= _time.monotonic() - step[1]
    assert [c["what"].rsplit(".", 1)[-1] for c in report["slow_callbacks"]] == ["get (Handler)"]
    assert "Handler.get" in report["slow_callbacks"][0]["what"]
    assert report["slow_callbacks"][0]["ms"] >= 100
    assert report["gc"]["2"]["n"] >= 1
    recorder.reset()
    assert recorder.report() == {"slow_callbacks": [], "gc": {}} and recorder.timeline == []


async def test_what_ran_tells_a_requests_first_and_last_steps_apart():
    import asyncio
    import time as _time

    from jupyter_gpuburst.bench.telemetry_server import WhatRan

    class Stream:  # the attributes tornado's RequestHandler keeps
        _headers_written = False
        _finished = False

        async def get(self):
            _time.sleep(0.001)
            self._headers_written = True  # the connect: up to the first flush
            await asyncio.sleep(0)
            _time.sleep(0.001)  # a sample
            await asyncio.sleep(0)
            _time.sleep(0.001)
            self._finished = True  # the end

    recorder = WhatRan()
    recorder.install()
    try:
        await asyncio.ensure_future(Stream().get())
    finally:
        recorder.uninstall()
    steps = [what.rsplit(".", 1)[-1] for _, _, what in recorder.timeline if "Stream" in what]
    assert steps == ["get (Stream, first step)", "get (Stream)", "get (Stream, last step)"]


async def test_what_ran_tells_the_status_calls_connection_from_others(monkeypatch):
    import asyncio

    from tornado import httpserver, testing, web

    from jupyter_gpuburst.bench import telemetry_server

    monkeypatch.setattr(telemetry_server, "TIMELINE_MIN_S", 0.0)  # every step, however short

    class APIStatusHandler(web.RequestHandler):  # named as jupyter_server's
        def get(self):
            self.finish("{}")

    class OtherHandler(web.RequestHandler):
        def get(self):
            self.finish("other")

    async def fetch(reader, writer, path):
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)

    sock, port = testing.bind_unused_port()
    server = httpserver.HTTPServer(web.Application([("/api/status", APIStatusHandler), ("/other", OtherHandler)]))
    server.add_sockets([sock])
    recorder = telemetry_server.WhatRan()
    recorder.install()
    try:
        status = await asyncio.open_connection("127.0.0.1", port)
        other = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):  # one keep-alive connection, as the probe's
            await fetch(*status, "/api/status")
        after_status = len(recorder.timeline)
        await fetch(*other, "/other")
        after_other = len(recorder.timeline)
        for _, writer in (status, other):
            writer.close()
    finally:
        recorder.uninstall()
        server.stop()

    def connection_steps(timeline):
        return [what for _, _, what in timeline if what.endswith("connection)")]

    assert "the status calls' connection" in " ".join(connection_steps(recorder.timeline[:after_status]))
    others = connection_steps(recorder.timeline[after_status:after_other])
    assert others and all(w.endswith("(another connection)") for w in others)
    # so the status calls' own steps are left out of what slowed them, and another's are not
    timeline = [[0.0, 1.0, what] for what in connection_steps(recorder.timeline)]
    kept = telemetry_figures.slowest_status_overlapped([(0.0, 1.0)], timeline)["by_what"]
    assert kept and all(what.endswith("(another connection)") for what in kept)
