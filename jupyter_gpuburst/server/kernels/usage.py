"""GPU use of this server's remote GPU kernels, asked of each kernel over its own control channel.

Each GPU kernel's pod measures its GPUs itself and answers Jupyter's ``usage_request`` with them
(``jupyter_gpuburst.kernel.gpu``). The request is an ordinary kernel message, signed with
the kernel's key like every other: no address, port or credential beyond what the kernel manager
already holds. Answers are kept a few seconds, so an open panel costs each kernel one small
message per refresh at most, and a kernel that does not answer in time shows no figures rather
than holding the panel up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from queue import Empty
from typing import Any

import zmq.asyncio
from jupyter_client.session import Session

log = logging.getLogger(__name__)

TTL_S = 3.0
TIMEOUT_S = 2.0
# Jupyter's message types of the probe, answered on the control channel (kernel/gpu.py)
PROBE_MESSAGE_TYPES = ("usage_request", "usage_reply")


def untrack_probes(kernel_manager: Any) -> None:
    """Keep the probe out of jupyter_server's activity tracking, as its other control messages are
    (``untracked_message_types``: "a superset of the message types sent on any channel other than
    the shell channel"). Tracked, the kernel's busy status while it answers made the kernel
    "busy" in the server's eyes: the GPU culling report then said 0 s idle for every probe that
    overlapped it, and the kernel's idleness jumped between its true age and 0 (a panel saw
    "active" where the hub warned); and every probe counted as activity for jupyter_server's own
    kernel culler."""
    untracked = getattr(kernel_manager, "untracked_message_types", None)
    if untracked is None:  # a kernel manager that tracks no activity
        return
    missing = [t for t in PROBE_MESSAGE_TYPES if t not in untracked]
    if missing:
        kernel_manager.untracked_message_types = [*untracked, *missing]


async def ask_usage(kernel: Any, timeout: float = TIMEOUT_S, content: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The kernel's ``usage_reply`` content, or None when it does not answer within ``timeout``.

    A client of its own: its own session (same key), so its socket identity is not the kernel
    manager's (a kernel's ROUTER socket hands a shared identity over to the newest peer, and the
    manager's own replies would go astray), its own context, and only the control channel.
    """
    session = Session(key=kernel.session.key, signature_scheme=kernel.session.signature_scheme)
    context = zmq.asyncio.Context()
    client = kernel.client(session=session, context=context)
    client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    channel = client.control_channel
    try:
        request = session.msg(PROBE_MESSAGE_TYPES[0], content or {})
        channel.send(request)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = await channel.get_msg(timeout=left)
            if reply.get("parent_header", {}).get("msg_id") == request["header"]["msg_id"]:
                content = reply.get("content")
                return content if isinstance(content, dict) else None
    except (Empty, TimeoutError, asyncio.TimeoutError):
        return None
    except Exception:  # noqa: BLE001 - a figure in a panel never raises to the student
        log.debug("GPU kernel usage: asking %s failed", getattr(kernel, "kernel_id", "?"), exc_info=True)
        return None
    finally:
        channel.stop()
        context.destroy(linger=0)
    return None


def gpu_figures(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``gpu`` part of a usage reply, checked: numbers where numbers belong, else None."""
    gpu = (usage or {}).get("gpu")
    if not isinstance(gpu, dict):
        return None
    out: dict[str, Any] = {
        "backend": gpu.get("backend") if isinstance(gpu.get("backend"), str) else None,
        "simulated": bool(gpu.get("simulated")),
        "reason": gpu.get("reason") if isinstance(gpu.get("reason"), str) else None,
    }
    for name in ("memory_used_bytes", "memory_total_bytes", "utilization", "sampled_at"):
        value = gpu.get(name)
        out[name] = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    return out


class KernelUsageCache:
    """Latest GPU figures per kernel id, refreshed at most every ``ttl_s`` seconds."""

    def __init__(self, ttl_s: float = TTL_S, timeout: float = TIMEOUT_S) -> None:
        self.ttl_s = ttl_s
        self.timeout = timeout
        self._entries: dict[str, tuple[float, dict[str, Any] | None]] = {}

    async def figures(self, kernel_manager: Any, kernel_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        now = time.monotonic()
        for gone in set(self._entries) - set(kernel_ids):
            del self._entries[gone]
        stale = [k for k in kernel_ids if now - self._entries.get(k, (float("-inf"), None))[0] >= self.ttl_s]

        async def refresh(kernel_id: str) -> None:
            try:
                kernel = kernel_manager.get_kernel(kernel_id)
            except KeyError:
                return
            self._entries[kernel_id] = (time.monotonic(), gpu_figures(await ask_usage(kernel, self.timeout)))

        await asyncio.gather(*(refresh(k) for k in stale))
        return {k: self._entries[k][1] for k in kernel_ids if k in self._entries}
