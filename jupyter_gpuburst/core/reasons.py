"""The sentence a student reads about a placement: where it goes, or which resource is short where.

Reasons name the short resource in plain words ("donor-1: 4 CPU granted, profile gpu-1 needs
8"; "origin: no node has 8 CPU and 2 GPUs free") and GPUs by their friendly names (``names``). They are built from the same snapshot
the decision used, with bounded work: site totals, the best-fit index, and at most
``SAMPLE_NODES`` nodes read one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from . import keys, names
from .quantities import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, describe

if TYPE_CHECKING:
    from .inventory import SiteCapacity, Snapshot

ORIGIN_SITE = keys.ORIGIN_SITE
SAMPLE_NODES = 64
_ORDER = {CPU: 1, MEMORY: 2, EPHEMERAL_STORAGE: 3, PODS: 4}


class _Request(Protocol):
    resource: str
    count: int
    profile: str
    allowed_sites: tuple[str, ...] | None


def amount(resource: str, value: int) -> str:
    """The number alone, in the unit ``describe`` would use: "8", "16 GiB"."""
    text = describe(resource, value)
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        return text.split(" of ", 1)[0]
    return text.split(" ", 1)[0]


def _who(request: _Request) -> str:
    return f"profile {request.profile}" if request.profile else "the server"


def _ordered(demand: Mapping[str, int], gpu: str) -> list[str]:
    """The GPU first, then CPU, memory, ephemeral storage, pod slots."""
    return sorted(demand, key=lambda r: (0 if r == gpu else _ORDER.get(r, 5), r))


def shortage(site: SiteCapacity, request: _Request, demand: Mapping[str, int], snapshot: Snapshot) -> tuple[str, str] | None:
    """(short resource, why the whole pod fits no node of ``site``), or None when it fits one.

    Checked in order: what the site has in all (a donor's grant), what is free in all, then what
    no single node has free together.
    """
    gpu = request.resource
    for resource in _ordered(demand, gpu):
        need = demand[resource]
        totals = site.total(resource)
        if totals.allocatable >= need:
            continue
        if resource == gpu:
            if not totals.allocatable and site.is_donor:
                return resource, f"no {resource} granted"
            return resource, f"{totals.free} of {totals.allocatable} free"
        have = describe(resource, totals.allocatable)
        if site.is_donor:
            return resource, f"{have} granted, {_who(request)} needs {amount(resource, need)}"
        return resource, f"{have} in all, {_who(request)} needs {amount(resource, need)}"
    for resource in _ordered(demand, gpu):
        need = demand[resource]
        totals = site.total(resource)
        if totals.free >= need:
            continue
        if resource == gpu:
            return resource, f"{totals.free} of {totals.allocatable} free"
        return resource, (
            f"{amount(resource, totals.free)} of {describe(resource, totals.allocatable)} free, "
            f"{_who(request)} needs {amount(resource, need)}"
        )
    if snapshot.best_fit(site.site, gpu, demand) is not None:
        return None
    if snapshot.max_free_on_a_node(site.site, gpu) < request.count:
        return gpu, f"no single node has {request.count} free"
    short = _short_beside_gpus(site, demand, snapshot, gpu)
    wanted = [describe(r, demand[r]) for r in short] + [describe(gpu, request.count)]
    together = wanted[0] if len(wanted) == 1 else f"{', '.join(wanted[:-1])} and {wanted[-1]}"
    return (short[0] if short else gpu), f"no node has {together} free"


def _short_beside_gpus(site: SiteCapacity, demand: Mapping[str, int], snapshot: Snapshot, gpu: str) -> list[str]:
    """Resources that are short on the nodes that do have the GPUs (a bounded sample of them)."""
    short: set[str] = set()
    seen = 0
    for level in snapshot.free_levels(site.site, gpu):
        if level < demand[gpu]:
            continue
        for name in snapshot.nodes_with_free(site.site, gpu, level):
            node = snapshot.nodes.get(name)
            if node is None:
                continue
            for resource, need in demand.items():
                if resource != gpu and node.free(resource) < need:
                    short.add(resource)
            seen += 1
            if seen >= SAMPLE_NODES:
                break
        if seen >= SAMPLE_NODES:
            break
    return [r for r in _ordered(demand, gpu) if r in short]


def _free_of(site: SiteCapacity | None, resource: str) -> tuple[int, int]:
    if site is None:
        return 0, 0
    totals = site.total(resource)
    return totals.free, totals.allocatable


def placed(
    site: SiteCapacity, node: str, request: _Request, demand: Mapping[str, int], snapshot: Snapshot, strategy: str, by_image: bool = False
) -> str:
    """Why the chosen site: free GPUs there and, for a donor, what kept the pod off the origin;
    ``by_image``: the node already has the pod's image (no pull before the start)."""
    resource, count = request.resource, request.count
    free, total = _free_of(site, resource)
    cached = IMAGE_THERE if by_image else ""
    if not site.is_donor:
        return f"{_free_text(free, total, resource)} on the origin; starting on the origin (node {node}{cached})."
    donor_part = f"starting on {site.site} ({_free_text(free, total, resource)} there{cached})."
    if strategy == "donor-first":
        return f"Donor-first policy: {donor_part}"
    if strategy == "donor-only":
        return f"Donor-only policy: {donor_part}"
    if request.allowed_sites is not None and ORIGIN_SITE not in request.allowed_sites:
        return f"Profile {request.profile!r} runs on donors only; {donor_part}"
    local = snapshot.site(ORIGIN_SITE)
    lfree, ltotal = _free_of(local, resource)
    units = names.gpu_units(resource, ltotal)
    if ltotal == 0:
        return f"The origin has no {names.gpu_units(resource, 2)}; {donor_part}"
    why = shortage(local, request, demand, snapshot) if local is not None else None  # type: ignore[arg-type]
    if why is not None and why[0] != resource:
        return f"The origin cannot take the server ({why[1]}); {donor_part}"
    if lfree >= count:
        return f"The origin has {lfree} of {ltotal} {units} free, but no single node has {count}; {donor_part}"
    if lfree == 0 and ltotal == 1:
        return f"The origin's only {units} is busy; {donor_part}"
    if lfree == 0:
        return f"All {ltotal} {units} on the origin are busy; {donor_part}"
    return f"The origin has {lfree} of {ltotal} {units} free, {count} needed; {donor_part}"


IMAGE_THERE = ", image already there"


def restarted(site: SiteCapacity, resource: str) -> str:
    """Why a restarted GPU kernel is back on the site it ran on (free GPUs before it took one)."""
    free, total = _free_of(site, resource)
    return f"Restarted where it ran before; starting on {site.site} ({_free_text(free, total, resource)} there)."


def _free_text(free: int, total: int, resource: str) -> str:
    return f"{free} of {total} {names.gpu_units(resource, total)} free"


def no_capacity(
    request: _Request,
    demand: Mapping[str, int],
    snapshot: Snapshot,
    strategy: str,
    local_allowed: bool,
    donor_notes: list[str],
) -> tuple[str, bool]:
    """Why no site can take the pod, site by site, and whether waiting can ever help."""
    resource, count = request.resource, request.count
    wanted = names.gpu_amount(resource, count)
    largest = _largest_node(request, snapshot, strategy, local_allowed)
    if largest < count and not donor_notes:
        biggest = f"the largest node has {largest}" if largest else f"no node has {names.gpu_units(resource, 2)}"
        return f"No site can ever start {wanted}: {biggest}. Choose a smaller profile.", True
    parts: list[str] = []
    local = snapshot.site(ORIGIN_SITE)
    if not local_allowed:
        parts.append("the origin is not allowed for this request")
    elif local is None or not local.total(resource).allocatable:
        parts.append(f"the origin has no {names.gpu_units(resource, 2)}")
    else:
        parts.append(_site_text(local, request, demand, snapshot))
    away: list[str] = []
    if strategy != "local-only" and not donor_notes:
        donors = snapshot.donors()
        if not donors:
            parts.append("no donor cluster is peered")
        for donor in donors:
            if not donor.ready:
                parts.append(f"{donor.site} is unreachable")
                away.append(donor.site)
                continue
            parts.append(_site_text(donor, request, demand, snapshot))
    parts.extend(donor_notes)
    extras = [describe(r, demand[r]) for r in _ordered(demand, resource) if r in (CPU, MEMORY, EPHEMERAL_STORAGE)]
    with_extras = f" with {', '.join(extras)}" if extras else ""
    # an unreachable donor usually comes back within minutes: say so, it is the likelier relief
    when = f"when {' or '.join(away)} is back or servers stop" if away else "when servers stop"
    return f"No site can start {wanted}{with_extras} now ({'; '.join(parts)}). It frees up {when}.", False


def _largest_node(request: _Request, snapshot: Snapshot, strategy: str, local_allowed: bool) -> int:
    """The most units of the GPU resource any allowed node has at all, busy or free.

    Read only when nothing fits, so the full pass over the nodes stays off the placing path.
    """
    largest = 0
    for node in snapshot.nodes.values():
        if node.is_donor and strategy == "local-only":
            continue
        if not node.is_donor and not local_allowed:
            continue
        if request.allowed_sites is not None and node.site not in request.allowed_sites:
            continue
        largest = max(largest, node.allocatable.get(request.resource, 0))
    return largest


def _site_text(site: SiteCapacity, request: _Request, demand: Mapping[str, int], snapshot: Snapshot) -> str:
    why = shortage(site, request, demand, snapshot)
    if why is not None and why[0] != request.resource:
        return f"{site.site}: {why[1]}"
    # short of GPUs, or the pod fits and the site was left out for another reason (an allowlist)
    free, total = _free_of(site, request.resource)
    if not total:
        granted = "granted" if site.is_donor else "on its nodes"
        return f"{site.site}: no {names.gpu_units(request.resource, 2)} {granted}"
    return f"{site.site} {free} of {total} free"
