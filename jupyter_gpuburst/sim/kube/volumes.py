"""Home volumes on the real control plane: the provisioner a cluster's storage would run.

kube-controller-manager binds claims to volumes but makes none: on a real cluster a CSI driver's
external provisioner creates each volume its StorageClass names, and without one every claim
stays Pending (kube-scheduler then refuses its pods: "pod has unbound immediate
PersistentVolumeClaims"). Each site here gets the emulator's default StorageClass
(``standard``, Immediate; the DefaultStorageClass admission gives it to a claim that names no
class), and this provisioner creates, for each Pending claim of it, the volume the emulator's
binder makes (sim/storage.py), pre-bound to the claim. The PV controller completes the binding,
as it does for any external provisioner, and the process kubelet keeps the claim's data by its
volume's name. A deleted claim's volume goes with it (reclaim policy Delete, which is the
external provisioner's to carry out). Liqo's ``liqo`` class is not provisioned here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.storage import DEFAULT_CLASS, STORAGE_CLASSES, install_default_class, provisioned_volume

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class Provisioner:
    """Volumes for ``store``'s (a RemoteStore's) claims of the default class, while started."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._task: asyncio.Task | None = None
        self._class: Obj = {}
        self._made: set[str] = set()  # volumes made for claims still here

    async def start(self) -> None:
        await asyncio.to_thread(install_default_class, self.store)
        self._class = await asyncio.to_thread(self.store.get, STORAGE_CLASSES, None, DEFAULT_CLASS)
        self._task = asyncio.create_task(self._run(), name="volume-provisioner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        watch = self.store.watch("persistentvolumeclaims")
        try:
            async for etype, pvc in watch:
                try:
                    if etype == "DELETED":
                        await self._release(pvc)
                    elif self._wanted(pvc):
                        await self._provision(pvc)
                except ApiError as exc:  # tried again on the claim's next event, as a provisioner's resync would
                    log.warning("volume for claim %s/%s: %s", pvc["metadata"].get("namespace"), pvc["metadata"]["name"], exc)
        finally:
            watch.close()

    def _wanted(self, pvc: Obj) -> bool:
        spec = pvc.get("spec") or {}
        pending = (pvc.get("status") or {}).get("phase", "Pending") == "Pending"
        return (
            pending
            and not spec.get("volumeName")
            and spec.get("storageClassName") == DEFAULT_CLASS
            and not pvc["metadata"].get("deletionTimestamp")
            and f"pvc-{pvc['metadata']['uid']}" not in self._made
        )

    async def _provision(self, pvc: Obj) -> None:
        pv = provisioned_volume(pvc, self._class)
        try:
            await asyncio.to_thread(self.store.create, "persistentvolumes", pv)
        except ApiError as exc:
            if exc.code != 409:
                raise
        self._made.add(pv["metadata"]["name"])

    async def _release(self, pvc: Obj) -> None:
        name = f"pvc-{pvc['metadata']['uid']}"
        if name not in self._made:
            return
        try:
            await asyncio.to_thread(self.store.delete, "persistentvolumes", None, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
        self._made.discard(name)
