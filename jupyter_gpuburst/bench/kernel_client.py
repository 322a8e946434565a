"""A student's side of a GPU kernel in the benchmarks: a token for the hub's kernel API, and a cell.

What a user server's provisioner does with the hub's kernel API (``server/kernels``), done from the
benchmark itself: the servers there are stand-ins that run no kernel manager.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp

from jupyter_gpuburst.bench.hubproc import HubProcess

# a server's own token carries the same scopes
KERNEL_SCOPES = ["custom:gpuburst:kernels", "access:services!service=gpuburst"]
FIRST_CELL = "import torch; torch.ones(1).cuda()"
# the benchmarks' GPU kernel: answers the Jupyter protocol, runs no code (its module says why)
STANDIN_KERNEL = [sys.executable, "-I", "-m", "jupyter_gpuburst.bench.standin_kernel"]


async def user_tokens(hub: HubProcess, http: aiohttp.ClientSession, users: list[str], note: str) -> dict[str, str]:
    """Each student's token for the GPU kernel API."""
    limit = asyncio.Semaphore(8)

    async def one(user: str) -> tuple[str, str]:
        async with limit:
            status, body = await hub.request(http, "POST", f"/users/{user}/tokens", json={"scopes": KERNEL_SCOPES, "note": note})
        if status != 201:
            raise RuntimeError(f"a token for {user}: HTTP {status}: {body}")
        return user, body["token"]

    return dict(await asyncio.gather(*(one(u) for u in users)))


async def run_cell(connection: dict[str, Any], key: str, deadline: float, code: str = FIRST_CELL) -> bool:
    """Whether the kernel answered ``code`` with "ok" before ``deadline``."""
    from queue import Empty

    from jupyter_client.asynchronous.client import AsyncKernelClient

    client = AsyncKernelClient()
    client.load_connection_info({**connection, "key": key.encode(), "signature_scheme": "hmac-sha256"})
    # the shell channel only: the cell's reply is all that is timed, and five channels (and a
    # heartbeat thread) a student reach ZMQ's 1023 sockets a context at about 200 students
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
    try:
        msg_id = client.execute(code)
        while time.monotonic() < deadline:
            try:
                reply = await client.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            except Empty:
                return False  # one student's silent kernel is theirs alone: the others' journeys go on
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"].get("status") == "ok"
        return False
    finally:
        client.stop_channels()
