"""The server's running kernels as the GPU sampler needs them (ids, names, notebooks, pids)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from jupyter_gpuburst.gpu.backend import KernelRef

log = logging.getLogger(__name__)


class ServerKernelSource:
    """Reads the kernel manager each call (cheap attribute reads); notebook paths less often.

    Called on the event loop by the sampler. The pid comes from the kernel's provisioner
    (jupyter_client's LocalProvisioner records it); remote provisioners have none, and such
    kernels are listed without GPU use rather than guessed.
    """

    def __init__(self, kernel_manager: Any, session_manager: Any | None, notebook_refresh_s: float = 5.0) -> None:
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.notebook_refresh_s = notebook_refresh_s
        self._paths: dict[str, str] = {}
        self._paths_for: frozenset[str] = frozenset()
        self._paths_at = float("-inf")

    async def _refresh_paths(self, kernel_ids: frozenset[str]) -> None:
        now = time.monotonic()
        if kernel_ids == self._paths_for and now - self._paths_at < self.notebook_refresh_s:
            return
        self._paths_for, self._paths_at = kernel_ids, now
        if self.session_manager is None or not kernel_ids:
            self._paths = {}
            return
        try:
            sessions = await self.session_manager.list_sessions()
        except Exception:  # noqa: BLE001 - paths are a nicety; never break telemetry over them
            log.debug("GPU telemetry: listing sessions failed", exc_info=True)
            return
        self._paths = {
            s["kernel"]["id"]: s["path"] for s in sessions if s.get("kernel") and s.get("type", "notebook") == "notebook" and s.get("path")
        }

    async def __call__(self) -> Sequence[KernelRef]:
        km = self.kernel_manager
        ids = list(km.list_kernel_ids())
        await self._refresh_paths(frozenset(ids))
        refs = []
        for kid in ids:
            try:
                kernel = km.get_kernel(kid)
            except KeyError:  # shut down meanwhile
                continue
            provisioner = getattr(kernel, "provisioner", None)
            pid = getattr(provisioner, "pid", None)
            refs.append(
                KernelRef(
                    kernel_id=kid,
                    name=getattr(kernel, "kernel_name", "") or "",
                    notebook=self._paths.get(kid),
                    pid=pid if isinstance(pid, int) else None,
                    execution_state=getattr(kernel, "execution_state", "unknown") or "unknown",
                )
            )
        return refs
