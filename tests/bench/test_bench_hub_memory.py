"""`gpuburst bench hub-memory` at small scale, and its checks' ability to fail."""

from __future__ import annotations

import argparse
import copy

import pytest

from jupyter_gpuburst.bench import hub_memory
from jupyter_gpuburst.bench import hub_memory_pods as pods


@pytest.mark.integration
@pytest.mark.timeout(240)
async def test_hub_memory_benchmark_small(tmp_path):
    result = await hub_memory.run([50], repeats=1, sessions=20, state_dir=tmp_path)
    [phase] = result["phases"]
    # the hub's tracker counted every pod, by watch events and by its first list
    assert phase["seen"] == {"before": 0, "watched": 50, "listed": 50}
    assert 50 < phase["rss_before_mib"] <= phase["peak_mib"]
    assert result["by_pods"]["50"]["rss_listed_mib"]["n"] == 1
    ledger = result["ledger"]
    assert ledger["sessions"] == ledger["ended"] == ledger["rows"]["sessions"] == ledger["rows"]["charges"] == 20
    assert ledger["bytes"] >= ledger["empty_bytes"] > 0
    assert result["hubs_started"] == 3 and result["federations_started"] == 2 and len(result["load_average"]) == 3
    assert set(result["checks"]) == {
        "every_pod_seen",
        "hub_rss_within_limit",
        "per_1000_pods_within_limit",
        "ledger_every_session_ended",
        "ledger_within_limit",
    }
    # the limits are for the benchmark at scale (a MiB of noise is 20 MiB per 1,000 of 50 pods)
    assert result["checks"]["every_pod_seen"] and result["checks"]["ledger_every_session_ended"]


GOOD = {
    "pods": [500, 5000],
    "phases": [
        {
            "pods": 500,
            "seen": {"before": 0, "watched": 500, "listed": 500},
            "rss_listed_mib": 170.0,
            "peak_mib": 171.0,
            "per_1000_pods_mib": 16.0,
        },
        {
            "pods": 5000,
            "seen": {"before": 0, "watched": 5000, "listed": 5000},
            "rss_listed_mib": 220.0,
            "peak_mib": 240.0,
            "per_1000_pods_mib": 12.0,
        },
    ],
    "ledger": {"sessions": 1000, "ended": 1000, "rows": {"sessions": 1000}, "bytes_per_1000_sessions": 300_000},
}


def test_each_check_can_fail():
    assert all(hub_memory.checks(GOOD).values())

    def bad(change):
        result = copy.deepcopy(GOOD)
        change(result)
        return hub_memory.checks(result)

    assert not bad(lambda r: r["phases"][1]["seen"].update(listed=4999))["every_pod_seen"]
    assert not bad(lambda r: r["phases"][0]["seen"].update(before=3))["every_pod_seen"]
    assert not bad(lambda r: r["phases"][1].update(peak_mib=hub_memory.HUB_RSS_LIMIT_MIB + 1))["hub_rss_within_limit"]
    # the limit is judged at the largest count only
    assert bad(lambda r: r["phases"][0].update(peak_mib=hub_memory.HUB_RSS_LIMIT_MIB + 1))["hub_rss_within_limit"]
    over = hub_memory.PER_1000_PODS_LIMIT_MIB + 0.1
    assert not bad(lambda r: r["phases"][1].update(per_1000_pods_mib=over))["per_1000_pods_within_limit"]
    assert bad(lambda r: r["phases"][0].update(per_1000_pods_mib=over))["per_1000_pods_within_limit"]
    assert not bad(lambda r: r["ledger"].update(ended=999))["ledger_every_session_ended"]
    assert not bad(lambda r: r["ledger"]["rows"].update(sessions=1001))["ledger_every_session_ended"]
    too_big = hub_memory.LEDGER_PER_1000_LIMIT_BYTES + 1
    assert not bad(lambda r: r["ledger"].update(bytes_per_1000_sessions=too_big))["ledger_within_limit"]
    # --sessions 0 leaves the ledger out, and its checks with it
    assert set(bad(lambda r: r.update(ledger=None))) == {"every_pod_seen", "hub_rss_within_limit", "per_1000_pods_within_limit"}


def test_pod_counts_are_read_or_refused_with_the_reason():
    assert hub_memory.pod_counts("500,5000") == [500, 5000]
    for text in ("500,,5000", "0", "500,500", "five"):
        with pytest.raises(argparse.ArgumentTypeError, match="count"):
            hub_memory.pod_counts(text)


def test_the_mix_holds_the_hub_s_servers_and_never_more_gpus_than_the_nodes_have():
    made = list(pods.mix(100, ["g-1", "g-2", "g-3", "g-4"], ["c-1"], 8))
    servers = [p for p in made if p["metadata"]["namespace"] == pods.USERS_NAMESPACE]
    assert len(servers) == 100 // pods.SERVER_EVERY
    gpu = [p for p in made if pods.GPU in p["spec"]["containers"][0]["resources"]["requests"]]
    assert len(gpu) == pods.gpu_pods(100)
    per_node = {n: sum(1 for p in gpu if p["spec"]["nodeName"] == n) for n in ("g-1", "g-2", "g-3", "g-4")}
    assert max(per_node.values()) <= 8 and "c-1" not in {p["spec"]["nodeName"] for p in gpu}
    with pytest.raises(ValueError, match="GPU nodes"):
        list(pods.mix(100, ["g-1"], ["c-1"], 8))
    assert hub_memory.gpu_nodes_for(5000) * hub_memory.GPUS_PER_NODE >= pods.gpu_pods(5000)
