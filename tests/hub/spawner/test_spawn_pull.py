"""The spawn page says when the server's image is being pulled onto a node that never ran it."""

from __future__ import annotations

import dataclasses

import pytest
from helpers.federation import DONOR, messages, occupy, pod_of

pytestmark = pytest.mark.integration


async def test_a_cold_donor_pull_shows_on_the_spawn_page(federation, start_hub):
    donor = federation.donors[DONOR].kubelet.images
    # the donor's nodes have no image yet and pull at 200 MiB/s: a 100 MiB image takes 0.5 s
    donor.settings = dataclasses.replace(donor.settings, bandwidth=200 * 1024**2, preloaded=())
    occupy(federation, "origin-gpu", 2, "hog")
    hub = await start_hub('c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.2}')
    status, body = await hub.spawn("dora", {"profile": "gpu1"})
    assert status == 202, body
    events = messages(await hub.progress("dora"))
    image = pod_of(federation, "dora")["spec"]["containers"][0]["image"]
    pulling = [i for i, m in enumerate(events) if m == f'Pulling image "{image}"']
    pulled = [i for i, m in enumerate(events) if m.startswith(f'Pulled image "{image}" (104.9 MB) in ')]
    assert pulling and pulled and pulling[0] < pulled[0], events
    assert not [m for m in events if "bytes" in m or "including waiting" in m], events
    assert not [m for m in events if "already present on machine" in m or "Started container" in m], events
    await hub.wait_ready("dora")
