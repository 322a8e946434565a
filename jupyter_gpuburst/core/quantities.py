"""Kubernetes quantities and pod requests in the integer units placement counts in.

CPU is counted in millicores, memory and ephemeral storage in bytes, pods and extended resources
(GPUs, MIG slices) in whole units, rounded up exactly as ``resource.Quantity`` rounds
(``MilliValue``/``Value``). A pod's effective request follows kube-scheduler
(``k8s.io/component-helpers/resource.PodRequests``): a container's request defaults to its limit,
app containers and sidecars (restartable init containers) add up, each ordinary init container
runs alone beside the sidecars started before it, the pod needs the larger of the two, plus its
RuntimeClass overhead. Every pod also takes one of the node's pod slots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from . import names

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
# Resources every pod is placed against, besides its GPUs.
COMPUTE_RESOURCES: tuple[str, ...] = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
_BYTE_RESOURCES = frozenset({MEMORY, EPHEMERAL_STORAGE})

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
# Kubernetes caps quantities near 2^63; anything longer is a typo, not a big machine.
_MAX_DIGITS = 24
_COUNT = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

# Quantity strings repeat endlessly ("500m", "8Gi", "1"): parsing each only once keeps a watch
# event in microseconds. Bounded, so a stream of odd values cannot grow it without end.
_CACHE_LIMIT = 4096
_cache: dict[tuple[bool, bool, str], int] = {}
# the same for whole container resource blocks: pods of one profile all look alike
_containers: dict[tuple[Any, ...], dict[str, int]] = {}
_NOTHING: Mapping[str, int] = {}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "8Gi", "1e3", 4) as an exact decimal number."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a quantity: {value!r}")
        return Decimal(repr(value))
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None
    if suffix and suffix[0] in "eE":
        result = base.scaleb(int(suffix[1:]))
    else:
        result = base * _SUFFIX[suffix]
    if result and result.adjusted() > _MAX_DIGITS:
        raise ValueError(f"quantity too large: {value!r}")
    return result


def parse_count(value: Any) -> int:
    """A whole number of units (GPUs, pods): plain digits, optionally with an exponent.

    Fractions and SI suffixes are refused rather than rounded: "1.5" or "2Gi" GPUs is a typo.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not _COUNT.match(text):
        raise ValueError(f"not a whole-number quantity: {value!r}")
    number = Decimal(text)
    if number and number.adjusted() > _MAX_DIGITS:
        raise ValueError(f"quantity too large: {value!r}")
    if number != number.to_integral_value():
        raise ValueError(f"not a whole-number quantity: {value!r}")
    return int(number)


def canonical(resource: str, value: Any) -> int:
    """``value`` of ``resource`` in placement units: millicores, bytes, or whole units.

    Raises ValueError for a malformed or negative quantity, and for a fractional count of a
    resource that only comes in whole units (Kubernetes refuses those too).
    """
    is_cpu = resource == CPU
    is_bytes = resource in _BYTE_RESOURCES or resource.startswith("hugepages-")
    key = (is_cpu, is_bytes, value) if isinstance(value, str) else None
    if key is not None:
        cached = _cache.get(key)
        if cached is not None:
            return cached
    if is_cpu:
        result = math.ceil(parse_quantity(value) * 1000)
    elif is_bytes:
        result = math.ceil(parse_quantity(value))
    else:
        result = parse_count(value)
    if result < 0:
        raise ValueError(f"negative quantity for {resource}: {value!r}")
    if key is not None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = result
    return result


def quantities(values: Mapping[str, Any] | None, tracked: Callable[[str], bool]) -> dict[str, int]:
    """The tracked entries of a requests/limits/allocatable map, in placement units.

    Malformed entries are skipped: they come from objects someone else wrote, and one bad
    value must not stop the watch that keeps every spawn informed.
    """
    out: dict[str, int] = {}
    if not values:
        return out
    for resource, value in values.items():
        if tracked(resource):
            try:
                out[resource] = canonical(resource, value)
            except (ValueError, TypeError):
                continue
    return out


def container_requests(container: Mapping[str, Any], tracked: Callable[[str], bool]) -> Mapping[str, int]:
    """One container's requests; a resource with only a limit requests its limit.

    The result is shared between containers with the same resources: do not change it.
    """
    resources = container.get("resources")
    if not resources:
        return _NOTHING
    limits = resources.get("limits")
    requests = resources.get("requests")
    try:
        key = (tracked, tuple(limits.items()) if limits else (), tuple(requests.items()) if requests else ())
        cached = _containers.get(key)
    except (TypeError, AttributeError):  # an unhashable or malformed value: parse without the cache
        key, cached = None, None
    if cached is not None:
        return cached
    result = quantities(requests, tracked) if not limits else {**quantities(limits, tracked), **quantities(requests, tracked)}
    if key is not None:
        if len(_containers) >= _CACHE_LIMIT:
            _containers.clear()
        _containers[key] = result
    return result


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, value in more.items():
        total[resource] = total.get(resource, 0) + value


def pod_requests(spec: Mapping[str, Any], tracked: Callable[[str], bool]) -> dict[str, int]:
    """The effective request of a pod spec, as kube-scheduler computes it (see the module doc).

    Includes ``pods: 1``; resources with a zero request are left out.
    """
    containers = spec.get("containers") or ()
    init_containers = spec.get("initContainers")
    overhead = spec.get("overhead")
    if len(containers) == 1 and not init_containers and not overhead:
        # the common pod, on the hot path of every watch event
        total = {r: v for r, v in container_requests(containers[0], tracked).items() if v > 0}
        total[PODS] = 1
        return total
    total: dict[str, int] = {}
    for container in containers:
        _add(total, container_requests(container, tracked))
    if init_containers:
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for container in init_containers:
            requests = container_requests(container, tracked)
            if container.get("restartPolicy") == "Always":
                # a sidecar keeps running beside the app containers and later init containers
                _add(total, requests)
                _add(sidecars, requests)
                running = dict(sidecars)
            else:
                running = dict(sidecars)
                _add(running, requests)
            for resource, value in running.items():
                if value > init_peak.get(resource, 0):
                    init_peak[resource] = value
        for resource, value in init_peak.items():
            if value > total.get(resource, 0):
                total[resource] = value
    if overhead:
        _add(total, quantities(overhead, tracked))
    total[PODS] = 1
    return {resource: value for resource, value in total.items() if value > 0}


def describe(resource: str, amount: int) -> str:
    """An amount in the words a student reads: "8 CPU", "16 GiB of memory", "2 GPUs"."""
    if resource == CPU:
        cores = amount / 1000
        return f"{cores:g} CPU"
    if resource in _BYTE_RESOURCES:
        what = "memory" if resource == MEMORY else "ephemeral storage"
        return f"{_bytes(amount)} of {what}"
    if resource == PODS:
        return "1 pod slot" if amount == 1 else f"{amount} pod slots"
    return names.gpu_amount(resource, amount)


def _bytes(amount: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if amount >= size:
            value = amount / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{amount} bytes"
