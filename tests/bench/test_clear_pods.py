"""Between two benchmark phases the federation is cleared until it stays clear, or the run stops."""

from __future__ import annotations

import asyncio

import pytest
from helpers.pods import pod

from jupyter_gpuburst.bench.spawn_federation import clear_pods
from jupyter_gpuburst.sim.testing import running_federation

pytestmark = pytest.mark.integration


def waiting_pod(name: str) -> dict:
    """A pod no node can take: it stays Pending, with no container to wait for."""
    return pod(name, {"name": "c", "image": "busybox"}, nodeSelector={"no-such-label": "x"})


async def test_a_pod_made_after_the_first_pass_is_deleted_too_and_counted_late(tmp_path):
    async with running_federation(state_dir=tmp_path) as fed:
        donor = next(iter(fed.donors.values()))
        fed.origin.store.create("pods", waiting_pod("left-by-the-phase"), "default")

        async def reflection_catching_up() -> None:
            await asyncio.sleep(0.6)  # after clear_pods' first pass, inside its quiet period
            donor.store.create("pods", waiting_pod("made-after-the-phase"), "default")

        late_create = asyncio.create_task(reflection_catching_up())
        cleared = await clear_pods(fed, timeout=30, quiet=1.5)
        await late_create

        assert (cleared.pods, cleared.late, cleared.left) == (2, 1, {})
        for cluster in fed.clusters.values():
            assert cluster.store.list("pods")[0] == []


async def test_pods_that_do_not_go_are_reported_where_they_are(tmp_path, monkeypatch):
    async with running_federation(state_dir=tmp_path) as fed:
        fed.origin.store.create("pods", waiting_pod("stuck"), "default")
        monkeypatch.setattr(fed.origin.store, "delete", lambda *args, **kwargs: None)

        cleared = await clear_pods(fed, timeout=1, quiet=0.5)

        assert cleared.left == {"origin pods": 1}
