"""GPU kernels that wait in the hub's queue (``GPUKernelSettings.queue_when_full``): real
JupyterHub, KubeSpawner, jupyter_server, the provisioner and ipykernel against the federation."""

from __future__ import annotations

import asyncio
import time
from functools import partial

import pytest
from helpers import user_server
from helpers.federation import occupy, release
from helpers.kernels import KERNEL_HUB

from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

QUEUED_KERNELS = KERNEL_HUB + "\nc.GPUKernelSettings.queue_when_full = True\n"
# the origin-only profile: with the origin full, no site may take it
ORIGIN_ONLY = "gpuburst-gpu-1-origin"
server_api = partial(user_server.server_api, timeout=120)
PROVISIONER_WAIT_STEP_S = GPUBurstProvisioner.wait_step_s.default_value


def kernel_pods(federation) -> list[dict]:
    items, _ = federation.origin.store.list("pods", "default", label_selector=f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}")
    return items


async def listed(hub, kernel_id: str) -> dict | None:
    """The kernel's row as the GPU panel reads it from the user's server."""
    status, listing = await server_api(hub, "alice", "GET", "/gpuburst/kernels")
    assert status == 200, listing
    return next((k for k in listing["kernels"] if k["kernel_id"] == kernel_id), None)


async def test_a_kernel_waits_its_turn_says_its_place_and_a_cell_run_meanwhile_runs(federation, start_hub):
    hub = await start_hub(QUEUED_KERNELS)
    await hub.spawn("alice", {"profile": "cpu"})
    await hub.wait_ready("alice")
    occupy(federation, "origin-gpu", 2, "hog")
    # the launcher learns that a kernel started with none free waits in line
    status, offered = await server_api(hub, "alice", "GET", "/gpuburst/kernel-profiles")
    assert status == 200 and offered["queues"] is True, offered
    status, first = await server_api(hub, "alice", "POST", "/kernels", {"name": ORIGIN_ONLY})
    assert status == 201 and first["execution_state"] == "starting", first

    async def first_queued():
        row = await listed(hub, first["id"])
        return row is not None and row["queue"] is not None and row

    # at once, not after the server's long-poll step (GPUBurstProvisioner.wait_step_s, 20 s): the
    # place is set just after the hub answered the start, and a poll that waited for the next
    # change missed it (nothing changes while the line stands still)
    asked = time.monotonic()
    row = await wait_until(first_queued, 30, "the first kernel's place in line")
    assert time.monotonic() - asked < PROVISIONER_WAIT_STEP_S / 2, "the place in line waited for the long-poll's step"
    assert row["queue"]["position"] == 1 and row["waiting"] == "a GPU: next in line, wait time unknown", row
    assert row["site"] is None and kernel_pods(federation) == []
    # the student runs a cell at once: it waits with the kernel, it is not lost
    cell = asyncio.ensure_future(execute(f"{hub.url}/user/alice", hub.token, first["id"], "print('ran after the wait')", timeout=120))

    status, second = await server_api(hub, "alice", "POST", "/kernels", {"name": ORIGIN_ONLY})
    assert status == 201, second

    async def second_queued():
        row = await listed(hub, second["id"])
        return row is not None and row["queue"] is not None and row

    row = await wait_until(second_queued, 30, "the second kernel's place in line")
    assert row["queue"]["position"] == 2 and row["waiting"].startswith("a GPU: 2nd in line, "), row
    status, capacity = await hub.capacity()
    assert status == 200 and capacity["queue_length"] == 2, capacity

    # the student gives up on the second: shutting it down withdraws its request
    status, _ = await server_api(hub, "alice", "DELETE", f"/kernels/{second['id']}")
    assert status == 204

    async def queue_length(n: int) -> bool:
        status, capacity = await hub.capacity()
        return status == 200 and capacity["queue_length"] == n

    await wait_until(lambda: queue_length(1), 30, "the second kernel out of the queue")

    # a GPU frees: the first kernel is placed, starts, and the waiting cell runs
    release(federation, "hog")
    out = await asyncio.wait_for(cell, 120)
    assert out["error"] is None and out["stdout"].endswith("ran after the wait\n"), out
    (pod,) = kernel_pods(federation)  # the cancelled one never made a pod
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    row = await listed(hub, first["id"])
    assert row["queue"] is None and row["site"] == "origin", row
    await wait_until(lambda: queue_length(0), 30, "an empty queue")
    status, capacity = await hub.capacity()
    assert capacity["reservations"] == 0, capacity


async def test_a_kernel_whose_wait_times_out_is_dead_with_the_reason(federation, start_hub):
    hub = await start_hub(QUEUED_KERNELS + "c.GPUKernelSettings.start_timeout = 3\n")
    await hub.spawn("alice", {"profile": "cpu"})
    await hub.wait_ready("alice")
    occupy(federation, "origin-gpu", 2, "hog")
    started = time.monotonic()
    status, body = await server_api(hub, "alice", "POST", "/kernels", {"name": ORIGIN_ONLY})
    assert status == 201, body

    async def dead():
        status, model = await server_api(hub, "alice", "GET", f"/kernels/{body['id']}")
        assert status == 200, model
        return model["execution_state"] == "dead" and model

    model = await wait_until(dead, 60, "the kernel to give up")
    assert time.monotonic() - started >= 3
    message = " ".join(model["reason"].split())
    assert "No GPU kernel" in message and "Waited 3 s in the queue without a free GPU" in message, model
    assert kernel_pods(federation) == []
    status, capacity = await hub.capacity()
    assert status == 200 and capacity["queue_length"] == 0 and capacity["reservations"] == 0, capacity
