"""What a server tells the hub its GPUs used since its previous report: peaks and a mean over its
samples, kept for the next report when the hub could not be reached, nothing without a GPU."""

from __future__ import annotations

import pytest
from helpers.activity import Kernels, Sampler

from jupyter_gpuburst.server.activity import ActivityReporter
from jupyter_gpuburst.server.gpuuse import UseSince, kernel_use

GIB = 2**30


def gpu(used_gib: float, util: float | None, uuid: str = "GPU-0") -> dict:
    return {"uuid": uuid, "utilization": util, "memory_used_bytes": int(used_gib * GIB), "memory_total_bytes": 40 * GIB}


async def test_a_report_carries_the_peaks_since_the_previous_one_and_starts_again():
    sampler = Sampler([gpu(2, 0.1), gpu(1, 0.3, "GPU-1")])
    reporter = ActivityReporter("http://hub/activity", "t", "", sampler, Kernels({}))
    await reporter.sample()
    sampler.gpus = [gpu(6, 0.9), gpu(1, 0.1, "GPU-1")]  # both GPUs together: 7 GiB at once
    await reporter.sample()
    sampler.gpus = [gpu(3, 0.0), gpu(0.5, 0.0, "GPU-1")]
    await reporter.sample()
    use = (await reporter.body())["use"]
    assert use["peak_memory_bytes"] == 7 * GIB and use["memory_total_bytes"] == 80 * GIB
    assert use["peak_utilization"] == 0.5  # the GPUs' mean at the busiest sample
    assert use["utilization_samples"] == 3 and use["utilization_sum"] == pytest.approx(0.2 + 0.5 + 0.0)
    # the next report has only what came after
    await reporter.sample()
    assert (await reporter.body())["use"]["peak_memory_bytes"] == int(3.5 * GIB)


async def test_a_server_without_a_gpu_reports_no_use():
    reporter = ActivityReporter("http://hub/activity", "t", "", Sampler([]), Kernels({}))
    await reporter.sample()
    assert (await reporter.body())["use"] is None


async def test_a_report_that_did_not_reach_the_hub_counts_in_the_next():
    reporter = ActivityReporter("http://127.0.0.1:9/activity", "t", "", Sampler([gpu(6, 0.8)]), Kernels({}))
    await reporter.sample()
    assert await reporter.report() is None and "cannot be reached" in reporter.error
    reporter.sampler.gpus = [gpu(1, 0.2)]
    await reporter.sample()
    use = (await reporter.body())["use"]
    assert use["peak_memory_bytes"] == 6 * GIB and use["peak_utilization"] == 0.8
    assert use["utilization_samples"] == 2 and use["utilization_sum"] == pytest.approx(1.0)


def test_a_gpu_kernels_figures_are_its_pods_latest_reading():
    reading = {"memory_used_bytes": 5 * GIB, "memory_total_bytes": 10 * GIB, "utilization": 0.25}
    assert kernel_use(reading) == {
        "peak_memory_bytes": 5 * GIB,
        "memory_total_bytes": 10 * GIB,
        "peak_utilization": 0.25,
        "utilization_sum": 0.25,
        "utilization_samples": 1,
    }
    # a MIG slice without utilization: memory alone
    assert kernel_use({**reading, "utilization": None})["utilization_samples"] == 0
    # no GPU read in its pod: nothing
    assert kernel_use({"memory_used_bytes": None, "reason": "no GPU"}) is None


def test_nothing_sampled_is_none_not_zero():
    assert UseSince().take() is None


def test_a_server_whose_gpus_nothing_culls_still_measures_where_the_hub_keeps_their_use():
    reporter = ActivityReporter("http://hub/activity", "t", "", Sampler([gpu(1, 0.1)]), Kernels({}))
    reporter.latest = {"targets": [{"target": "server", "state": "off"}], "measure_use": False}
    assert reporter.culling_off  # accounting off too: report once a period, sample nothing
    reporter.latest["measure_use"] = True
    assert not reporter.culling_off
