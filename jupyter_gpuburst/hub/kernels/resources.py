"""What a GPU kernel pod requests besides its GPU: CPU and memory, from the server profiles."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# a kernel profile's keys for its pod's CPU and memory (requests, then limits)
RESOURCE_KEYS = ("cpu", "memory", "cpu_limit", "memory_limit")
# what a kernel pod requests when neither its profile nor the spawner says: a kernel pod with
# no request at all would be BestEffort, the first pod the kubelet evicts under memory pressure
DEFAULT_REQUESTS = {"cpu": "1", "memory": "1Gi"}
# KubeSpawner's ByteSpecification: K, M, G, T are powers of 1024 (Kubernetes writes them Ki, ...)
_BYTES = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT])i?$")
# KubeSpawner trait -> kernel profile key
_SPAWNER_KEYS = {"cpu_guarantee": "cpu", "mem_guarantee": "memory", "cpu_limit": "cpu_limit", "mem_limit": "memory_limit"}


@dataclass(frozen=True)
class GPUResources:
    """Which extended resources are GPUs (the spawner's gpu_resource_names and _prefixes)."""

    names: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")
    prefixes: tuple[str, ...] = ("nvidia.com/mig-",)

    def is_gpu(self, resource: str) -> bool:
        return resource in self.names or any(resource.startswith(p) for p in self.prefixes)


def kube_quantity(value: Any, memory: bool = False) -> str:
    """A Kubernetes quantity from a kernel profile's or KubeSpawner's value ('' when unset).

    KubeSpawner reads memory like "24G" as 24 GiB; Kubernetes reads "24G" as 10^9 bytes, so
    those become "24Gi". Numbers are CPUs or bytes; anything else is taken as a quantity.
    """
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        raise ValueError(f"not a CPU or memory amount: {value!r}")
    if isinstance(value, int | float):
        return str(int(value)) if memory or float(value).is_integer() else str(value)
    text = str(value).strip()
    match = _BYTES.match(text) if memory else None
    if match:
        return f"{match.group(1)}{match.group(2)}i"
    return text


def server_profile_resources(override: Mapping[str, Any]) -> dict[str, str]:
    """A server profile's CPU and memory (its kubespawner_override) as kernel profile keys."""
    return spawner_resources(override.get)


def spawner_resources(get: Callable[[str], Any]) -> dict[str, str]:
    """KubeSpawner's cpu/mem guarantees and limits, read with ``get``, as kernel profile keys."""
    out: dict[str, str] = {}
    for trait, key in _SPAWNER_KEYS.items():
        quantity = kube_quantity(get(trait), memory=key.startswith("memory"))
        if quantity:
            out[key] = quantity
    return out


def pod_resources(profile: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) for a kernel pod's CPU and memory: Guaranteed or Burstable, never BestEffort.

    A profile's request with no limit is limited to itself (as before limits existed); a limit
    with no request requests the limit (as Kubernetes would). Neither: DEFAULT_REQUESTS, no limit.
    """
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for resource in ("cpu", "memory"):
        request, limit = getattr(profile, resource), getattr(profile, f"{resource}_limit")
        if request or limit:
            requests[resource] = request or limit
            limits[resource] = limit or request
        else:
            requests[resource] = DEFAULT_REQUESTS[resource]
    return requests, limits
