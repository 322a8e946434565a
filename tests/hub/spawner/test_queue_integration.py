"""The queue of spawns in a real JupyterHub: the place in line and the wait on the spawn page,
JupyterHub's own cancel of a pending spawn, and a wait that times out; neither leaves anything."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from helpers.federation import DONOR, occupy, pod_of, release

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

QUEUE = """
from jupyter_gpuburst.hub import install
install(c)
c.GPUBurstSpawner.queue_when_full = True
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.2}
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "1Gi"
c.KubeSpawner.pvc_name_template = "claim-{user_server}"
c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/tmp/gpuburst-home"}]
"""


def fill_every_site(federation) -> None:
    occupy(federation, "origin-gpu", 2, "hog")
    occupy(federation, DONOR, 8, "donor-hog")


def claim_of(federation, user: str) -> Any:
    try:
        return federation.origin.store.get("persistentvolumeclaims", "default", f"claim-{user}")
    except ApiError:
        return None


def follow(hub, user: str) -> tuple[asyncio.Task, list[dict[str, Any]]]:
    """Read the spawn's progress events as the spawn page does, into a list that grows live."""
    events: list[dict[str, Any]] = []

    async def read() -> None:
        headers = {"Authorization": f"token {hub.token}"}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            async with session.get(f"{hub.url}/hub/api/users/{user}/server/progress", headers=headers) as response:
                async for raw in response.content:
                    line = raw.decode().strip()
                    if line.startswith("data:"):
                        events.append(json.loads(line[5:]))
                        if events[-1].get("ready") or events[-1].get("failed"):
                            return

    return asyncio.ensure_future(read()), events


def said(events: list[dict[str, Any]]) -> list[str]:
    return [e.get("message", "") for e in events]


async def user_token(hub, user: str) -> str:
    status, body = await hub.api("POST", f"/users/{user}/tokens", {"note": "the student's browser"})
    assert status == 201, body
    return body["token"]


async def delete_as(hub, user: str, token: str) -> int:
    """What the spawn page's Cancel sends: DELETE of the pending server, as the student."""
    async with aiohttp.ClientSession() as session:
        async with session.delete(f"{hub.url}/hub/api/users/{user}/server", headers={"Authorization": f"token {token}"}) as response:
            return response.status


async def queue_gauge(hub) -> float:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}) as response:
            text = await response.text()
    line = next(line for line in text.splitlines() if line.startswith("jupyterhub_gpuburst_spawn_queue_length "))
    return float(line.split()[1])


async def nothing_queued_or_held(hub) -> bool:
    status, report = await hub.capacity()
    return status == 200 and report["queue_length"] == 0 and report["reservations"] == 0 and await queue_gauge(hub) == 0


async def test_the_queue_says_place_and_wait_live_and_cancel_leaves_nothing(federation, start_hub):
    fill_every_site(federation)
    hub = await start_hub(QUEUE)
    status, body = await hub.spawn("frank", {"profile": "gpu1"})
    assert status == 202, body
    frank, frank_events = follow(hub, "frank")
    await wait_until(lambda: "You are next in line for a GPU (wait time unknown)." in said(frank_events), 30, "frank's place")
    status, body = await hub.spawn("gina", {"profile": "gpu1"})
    assert status == 202, body
    gina, gina_events = follow(hub, "gina")
    await wait_until(lambda: "You are 2nd in line for a GPU (wait time unknown)." in said(gina_events), 30, "gina's place")
    assert claim_of(federation, "frank") is not None  # KubeSpawner made his home before the queue
    assert await queue_gauge(hub) == 2

    # frank gives up: his Cancel is JupyterHub's DELETE of the pending server, with his own token
    assert await delete_as(hub, "frank", await user_token(hub, "frank")) in (202, 204)
    await asyncio.wait_for(frank, 30)
    assert frank_events[-1].get("failed"), frank_events[-1]
    # gina moves up, and her page says so without a reload
    await wait_until(lambda: "You are next in line for a GPU (wait time unknown)." in said(gina_events), 30, "gina to move up")
    await wait_until(lambda: claim_of(federation, "frank") is None, 30, "frank's unused home claim to go")
    assert pod_of(federation, "frank") is None
    status, user = await hub.api("GET", "/users/frank")
    assert status == 200 and user["servers"] == {}, user

    assert await delete_as(hub, "gina", await user_token(hub, "gina")) in (202, 204)
    await asyncio.wait_for(gina, 30)
    await wait_until(lambda: claim_of(federation, "gina") is None, 30, "gina's unused home claim to go")
    await wait_until(lambda: nothing_queued_or_held(hub), 30, "the queue and the reservations to be empty")

    # nothing was held for them: a GPU that frees now goes to the next student at once
    release(federation, "hog")
    status, body = await hub.spawn("hank", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("hank")
    assert pod_of(federation, "hank")["spec"]["nodeName"] == "origin-gpu"
    assert pod_of(federation, "frank") is None and pod_of(federation, "gina") is None


async def test_a_home_that_existed_before_is_kept_when_the_wait_times_out(federation, start_hub):
    fill_every_site(federation)
    hub = await start_hub(QUEUE + "\nc.KubeSpawner.start_timeout = 3\n")
    # ivy's home is hers from an earlier term: a failed start must not take it
    federation.origin.store.create(
        "persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "claim-ivy", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    for user in ("ivy", "jack"):
        status, body = await hub.spawn(user, {"profile": "gpu1"})
        assert status == 202, body
    ivy, ivy_events = follow(hub, "ivy")
    jack, jack_events = follow(hub, "jack")
    await asyncio.wait_for(asyncio.gather(ivy, jack), 60)
    for events in (ivy_events, jack_events):
        assert events[-1].get("failed"), events[-1]
    await wait_until(lambda: claim_of(federation, "jack") is None, 30, "jack's unused home claim to go")
    assert claim_of(federation, "ivy") is not None
    assert pod_of(federation, "ivy") is None and pod_of(federation, "jack") is None
    await wait_until(lambda: nothing_queued_or_held(hub), 30, "the queue and the reservations to be empty")
