"""The NVIDIA device plugin's part of the kubelet: specific devices for each pod, one pod per device.

A node that lists its devices (``NodeConfig.devices``: real GPUs or MIG slices, found by
``--gpus auto``) gives each pod that asks for its resources that many devices of its own, never
one another pod holds, and takes them back when the pod ends or goes. The container learns them
as the device plugin's "envvar" strategy says (``NVIDIA_VISIBLE_DEVICES``, the UUIDs); as nothing
here isolates devices the way the NVIDIA container runtime does, ``CUDA_VISIBLE_DEVICES`` says the
same to CUDA, and the NVML backend reads only the devices listed (``gpu/nvml.py``). The
NVIDIA runtime also makes the driver's libraries visible to a GPU container: here they are where
this machine finds them, so a GPU container's ``LD_LIBRARY_PATH`` ends with the kubelet's own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jupyter_gpuburst.core.keys import CUDA_VISIBLE_DEVICES_ENV, NVIDIA_VISIBLE_DEVICES_ENV

Obj = dict[str, Any]


class AdmissionError(Exception):
    """The kubelet cannot give a pod the devices it asks for (``UnexpectedAdmissionError``)."""


def _amount(container: Obj, resource: str) -> int:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):  # extended resources: requests equal limits when both are set
        value = (resources.get(part) or {}).get(resource)
        if value is not None:
            try:
                amount = parse_quantity(value)
            except ValueError:
                amount = None
            if amount is None or amount != int(amount) or amount < 0:
                raise AdmissionError(f"{resource} must be a whole number of devices, not {value!r}")
            return int(amount)
    return 0


class DevicePlugin:
    """Devices per node and resource, and which pod (uid) holds each."""

    def __init__(self, nodes: dict[str, dict[str, tuple[str, ...]]] | None = None) -> None:
        self.nodes = {node: {res: tuple(ids) for res, ids in devs.items()} for node, devs in (nodes or {}).items() if devs}
        self._holder: dict[str, str] = {}  # device id -> pod uid
        self._pods: dict[str, dict[str, dict[str, list[str]]]] = {}  # pod uid -> container -> resource -> ids
        self._lock = threading.Lock()

    def allocate(self, node: str, pod: Obj) -> dict[str, dict[str, list[str]]]:
        """Devices for each container of ``pod`` on ``node`` (container name -> resource -> IDs).

        App containers get devices of their own; init containers run before them and reuse the
        pod's (as the kubelet's device manager does). Raises AdmissionError, changing nothing,
        where the node has fewer free than asked for.
        """
        devices = self.nodes.get(node)
        uid = pod["metadata"]["uid"]
        if not devices:
            return {}
        spec = pod.get("spec") or {}
        with self._lock:
            if uid in self._pods:
                return self._pods[uid]
            taken: dict[str, list[str]] = {}
            out: dict[str, dict[str, list[str]]] = {}
            for resource, ids in devices.items():
                need_app = [(c["name"], _amount(c, resource)) for c in spec.get("containers") or []]
                need_init = [(c["name"], _amount(c, resource)) for c in spec.get("initContainers") or []]
                total = max(sum(n for _, n in need_app), max((n for _, n in need_init), default=0))
                if not total:
                    continue
                free = [d for d in ids if d not in self._holder]
                if len(free) < total:
                    raise AdmissionError(
                        f"Allocate failed due to requested number of devices unavailable for {resource}. "
                        f"Requested: {total}, Available: {len(free)}, which is unexpected"
                    )
                mine = free[:total]
                taken[resource] = mine
                at = 0
                for name, n in need_app:
                    if n:
                        out.setdefault(name, {})[resource] = mine[at : at + n]
                        at += n
                for name, n in need_init:
                    if n:
                        out.setdefault(name, {})[resource] = mine[:n]
            for ids in taken.values():
                for d in ids:
                    self._holder[d] = uid
            self._pods[uid] = out
            return out

    def release(self, uid: str) -> None:
        """The pod ended or went: its devices are free for the next pod."""
        with self._lock:
            self._pods.pop(uid, None)
            for device in [d for d, holder in self._holder.items() if holder == uid]:
                del self._holder[device]

    def holders(self) -> dict[str, str]:
        """Device ID -> the uid of the pod holding it."""
        with self._lock:
            return dict(self._holder)

    def env(self, uid: str, container: str, given: Mapping[str, str], host: Mapping[str, str] = os.environ) -> dict[str, str]:
        """What the container's environment ``given`` gains: which devices are its own, and the
        driver's libraries (none for a container without devices)."""
        with self._lock:
            ids = [d for res in (self._pods.get(uid) or {}).get(container, {}).values() for d in res]
        if not ids:
            return {}
        value = ",".join(ids)
        out = {NVIDIA_VISIBLE_DEVICES_ENV: value, CUDA_VISIBLE_DEVICES_ENV: value}
        libraries = [p for p in (given.get("LD_LIBRARY_PATH"), host.get("LD_LIBRARY_PATH")) if p]
        if libraries:
            out["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
        return out
