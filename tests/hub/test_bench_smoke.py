"""Small-scale runs of the spawn and redirect benchmarks (the full ones: benchmarks/README.md)."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import redirect, spawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def test_spawn_benchmark_small(tmp_path):
    result = await spawn.run(users=5, local_gpus=2, donor_gpus=8, state_dir=tmp_path, start_timeout=60)
    assert result["failures"] == []
    assert result["ready"] == result["baseline_ready"] == 5
    assert result["sites"] == {"origin": 2, "donor-1": 3}
    assert result["overcommitted"] == 0
    assert result["redirects"] == 0
    assert result["extra_api_reads_per_spawn"] == 0
    assert 0 < result["p50_spawn_s"] <= result["p95_spawn_s"]


async def test_redirect_benchmark_small(tmp_path):
    result = await redirect.run(runs=1, state_dir=tmp_path)
    assert result["failures"] == []
    assert result["redirected"] == result["ready"] == 1
    assert result["redirects_metric"] == 1
    assert 0 <= result["redirect_s"] <= 2.0


def test_overcommit_count_sees_a_pod_beyond_allocatable():
    """The over-commit check itself can fail: two 2-GPU pods bound to a 2-GPU node."""
    from jupyter_gpuburst.bench import synthetic

    class FakeCluster:
        class store:  # noqa: N801 - mimics Cluster.store
            @staticmethod
            def list(rtype):
                if rtype == "nodes":
                    return [synthetic.node("n1", {"nvidia.com/gpu": 2})], "1"
                pods = [synthetic.pod(f"p{i}", node_name="n1", gpus={"nvidia.com/gpu": 2}) for i in range(2)]
                for i, pod in enumerate(pods):
                    pod["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:0{i}Z"
                    pod["metadata"]["resourceVersion"] = str(i + 1)
                return pods, "2"

    class FakeFederation:
        clusters = {"origin": FakeCluster()}

    assert spawn.overcommitted_pods(FakeFederation()) == 1
