"""Shutting down a GPU kernel that still waits to start withdraws its request at the hub first.

jupyter_client's ``MultiKernelManager.shutdown_kernel`` awaits a pending kernel's start before it
stops the kernel. For a GPU kernel waiting in the hub's queue that is the GPU the student just
gave up: their shutdown (JupyterLab's Shut Down Kernel, the GPU panel's Cancel) would hang until
a GPU freed or the wait timed out. Withdrawing first ends the start at once, so the shutdown
goes through at once and the hub keeps nothing for it.
"""

from __future__ import annotations

import functools
from typing import Any

from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner


async def withdraw_if_waiting(kernel_manager: Any, kernel_id: str) -> bool:
    """Withdraw the hub's request of ``kernel_id`` when it is a GPU kernel not ready yet."""
    try:
        kernel = kernel_manager.get_kernel(kernel_id)
    except KeyError:
        return False
    provisioner = getattr(kernel, "provisioner", None)
    ready = getattr(kernel, "ready", None)
    if not isinstance(provisioner, GPUBurstProvisioner) or ready is None or ready.done():
        return False
    return await provisioner.withdraw()


def install(kernel_manager: Any) -> None:
    """Make ``kernel_manager.shutdown_kernel`` withdraw a waiting GPU kernel's request first."""
    shutdown = kernel_manager.shutdown_kernel
    if getattr(shutdown, "_gpuburst_withdraws", False):
        return

    @functools.wraps(shutdown)
    async def shutdown_kernel(kernel_id: str, now: bool = False, restart: bool = False) -> Any:
        if not restart:
            await withdraw_if_waiting(kernel_manager, kernel_id)
        result = shutdown(kernel_id, now=now, restart=restart)
        return await result if hasattr(result, "__await__") else result

    shutdown_kernel._gpuburst_withdraws = True  # type: ignore[attr-defined]
    kernel_manager.shutdown_kernel = shutdown_kernel
