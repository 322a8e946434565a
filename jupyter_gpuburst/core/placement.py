"""Where a GPU server should run: a pure function of request, inventory, reservations and policy.

No Kubernetes client, no JupyterHub, no I/O: everything arrives as arguments, so the policy can
be tested exhaustively and benchmarked alone. The spawner turns a ``Placement`` into pod fields.

Ordering, from strongest to weakest:
1. the strategy's tiers (local-first tries the origin before any donor, and so on);
2. an admin's ordered donor list (earlier donors first);
3. the loss  ``a * latency + b * idle GPU memory``  (the heuristic-allocation paper's score):
   latency is 0 on the origin and ``donor_latency_penalty`` (or a per-donor value) on a donor;
   idle memory is what the chosen node would leave stranded, so the smallest slice that fits
   wins (best fit) and GPUs stay together for larger requests.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from . import keys, liqo
from .inventory import DEFAULT_RESOURCE_NAMES, DEFAULT_RESOURCE_PREFIXES, SiteCapacity, Snapshot

ORIGIN_SITE = keys.ORIGIN_SITE
DEFAULT_MAX_COUNT = 16


class Strategy(str, Enum):
    LOCAL_FIRST = "local-first"
    DONOR_FIRST = "donor-first"
    LOCAL_ONLY = "local-only"
    DONOR_ONLY = "donor-only"


# ---- errors: bad input is the caller's fault and is reported as such ------------------------
class PlacementInputError(ValueError):
    """A request the policy cannot even consider; the message says what to fix."""


class UnknownResource(PlacementInputError):
    pass


class InvalidCount(PlacementInputError):
    pass


class UnknownProfile(PlacementInputError):
    pass


class UnknownSite(PlacementInputError):
    pass


# ---- inputs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPURequest:
    resource: str
    count: int
    user: str
    groups: frozenset[str] = frozenset()
    profile: str = ""
    # None: any site the policy allows; otherwise only these site names ("origin" or donor ids)
    allowed_sites: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Policy:
    strategy: Strategy = Strategy.LOCAL_FIRST
    # Donors tried in this order before any donor not listed.
    donor_order: tuple[str, ...] = ()
    # None: every peered donor may be used.
    donor_allowlist: frozenset[str] | None = None
    # profile slug -> donors that profile may use (overrides donor_allowlist for that profile).
    profile_donors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    user_donor_cap: int | None = None
    group_donor_caps: Mapping[str, int] = field(default_factory=dict)
    donor_latency_penalty: float = 1.0
    donor_latency: Mapping[str, float] = field(default_factory=dict)
    idle_memory_weight: float = 1.0
    # GiB of GPU memory per unit of a resource, for the idle-memory term (default 1 per unit).
    resource_memory_gib: Mapping[str, float] = field(default_factory=dict)
    resource_names: frozenset[str] = frozenset(DEFAULT_RESOURCE_NAMES)
    resource_prefixes: tuple[str, ...] = DEFAULT_RESOURCE_PREFIXES
    max_count: int = DEFAULT_MAX_COUNT
    # None: profiles are not checked here (the spawner checks its own list).
    known_profiles: frozenset[str] | None = None
    # Pin local pods to the chosen node: kube-scheduler's default scoring spreads pods, which
    # strands GPUs; pinning makes best fit real and keeps the reservation exact.
    pin_node: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", Strategy(self.strategy))
        if self.max_count < 1:
            raise PlacementInputError(f"max_count must be at least 1, not {self.max_count}")
        if self.user_donor_cap is not None and self.user_donor_cap < 0:
            raise PlacementInputError(f"user_donor_cap must not be negative, not {self.user_donor_cap}")
        for group, cap in self.group_donor_caps.items():
            if cap < 0:
                raise PlacementInputError(f"donor cap of group {group!r} must not be negative, not {cap}")
        for name, weight in (("donor_latency_penalty", self.donor_latency_penalty), ("idle_memory_weight", self.idle_memory_weight)):
            if not math.isfinite(weight) or weight < 0:
                raise PlacementInputError(f"{name} must be a finite number >= 0, not {weight}")

    def knows_resource(self, resource: str) -> bool:
        return resource in self.resource_names or resource.startswith(self.resource_prefixes)


# ---- outputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    site: str
    cluster_id: str | None
    node: str | None
    resource: str
    count: int
    reason: str
    loss: float = 0.0

    @property
    def is_donor(self) -> bool:
        return self.cluster_id is not None

    def node_affinity(self) -> dict[str, Any]:
        """``spec.affinity.nodeAffinity`` pinning the pod to this placement."""
        if self.is_donor:
            term = liqo.donor_node_affinity_term(self.cluster_id)  # type: ignore[arg-type]
        else:
            term = liqo.local_node_affinity_term()
            if self.node:
                term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": [self.node]}]
        return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}

    def tolerations(self) -> list[dict[str, str]]:
        return [liqo.virtual_node_toleration()] if self.is_donor else []

    def labels(self) -> dict[str, str]:
        out = {keys.SITE_LABEL: self.site}
        if self.cluster_id:
            out[keys.CLUSTER_LABEL] = self.cluster_id
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "cluster_id": self.cluster_id,
            "node": self.node,
            "resource": self.resource,
            "count": self.count,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class NoCapacity:
    reason: str


# ---- reservations ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Reservation:
    key: str
    site: str
    node: str | None
    resource: str
    count: int
    user: str
    groups: frozenset[str]
    expires_at: float


class Reservations:
    """GPUs promised to in-flight spawns, so two spawns never count the same free GPU.

    Taken at decision time; released when the pod is bound (the inventory then counts it) or the
    spawn fails; expired after ``ttl_s`` so a crashed spawn cannot leak capacity. Every
    operation is O(1) except expiry, which is O(log n) per expired entry.
    """

    def __init__(self, ttl_s: float = 300.0) -> None:
        if ttl_s <= 0:
            raise ValueError(f"reservation ttl must be positive, not {ttl_s}")
        self.ttl_s = ttl_s
        self._by_key: dict[str, Reservation] = {}
        self._node_units: dict[tuple[str, str], int] = {}
        self._site_units: dict[tuple[str, str], int] = {}
        self._owner_donor_units: dict[tuple[str, str], int] = {}
        self._site_nodes: dict[tuple[str, str], dict[str, int]] = {}
        self._expiry: list[tuple[float, int, str]] = []
        self._tiebreak = itertools.count()

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    def __iter__(self):
        return iter(list(self._by_key.values()))

    def get(self, key: str) -> Reservation | None:
        return self._by_key.get(key)

    def reserve(self, key: str, placement: Placement, request: GPURequest, now: float) -> Reservation:
        self.release(key)  # a re-placement replaces the spawn's earlier hold
        reservation = Reservation(
            key=key,
            site=placement.site,
            node=placement.node,
            resource=placement.resource,
            count=placement.count,
            user=request.user,
            groups=frozenset(request.groups),
            expires_at=now + self.ttl_s,
        )
        self._by_key[key] = reservation
        self._account(reservation, +1)
        heapq.heappush(self._expiry, (reservation.expires_at, next(self._tiebreak), key))
        return reservation

    def release(self, key: str) -> Reservation | None:
        reservation = self._by_key.pop(key, None)
        if reservation is not None:
            self._account(reservation, -1)
        return reservation

    def expire(self, now: float) -> list[Reservation]:
        expired = []
        while self._expiry and self._expiry[0][0] <= now:
            expires_at, _n, key = heapq.heappop(self._expiry)
            current = self._by_key.get(key)
            if current is not None and current.expires_at == expires_at:
                expired.append(self.release(key))
        return expired  # type: ignore[return-value]

    def _account(self, r: Reservation, sign: int) -> None:
        def bump(table: dict, k: tuple) -> None:
            value = table.get(k, 0) + sign * r.count
            if value:
                table[k] = value
            else:
                table.pop(k, None)

        if r.node:
            bump(self._node_units, (r.node, r.resource))
            holders = self._site_nodes.setdefault((r.site, r.resource), {})
            holders[r.node] = holders.get(r.node, 0) + sign
            if not holders[r.node]:
                del holders[r.node]
        bump(self._site_units, (r.site, r.resource))
        if r.site != ORIGIN_SITE:
            bump(self._owner_donor_units, ("user", r.user))
            for group in r.groups:
                bump(self._owner_donor_units, ("group", group))

    def on_node(self, node: str, resource: str) -> int:
        return self._node_units.get((node, resource), 0)

    def on_site(self, site: str, resource: str) -> int:
        return self._site_units.get((site, resource), 0)

    def donor_units(self, kind: str, name: str) -> int:
        return self._owner_donor_units.get((kind, name), 0)

    def reserved_nodes(self, site: str, resource: str) -> list[str]:
        return list(self._site_nodes.get((site, resource), ()))


# ---- the decision ---------------------------------------------------------------------------
def validate_request(request: GPURequest, policy: Policy) -> None:
    if not request.user:
        raise PlacementInputError("a GPU request needs the user it is for")
    if not isinstance(request.resource, str) or not policy.knows_resource(request.resource):
        known = sorted(policy.resource_names) + [p + "*" for p in policy.resource_prefixes]
        raise UnknownResource(f"unknown GPU resource {request.resource!r}; configured: {', '.join(known)}")
    if isinstance(request.count, bool) or not isinstance(request.count, int):
        raise InvalidCount(f"GPU count must be a whole number, not {request.count!r}")
    if not 1 <= request.count <= policy.max_count:
        raise InvalidCount(f"GPU count must be between 1 and {policy.max_count}, not {request.count}")
    if policy.known_profiles is not None and request.profile not in policy.known_profiles:
        raise UnknownProfile(f"unknown profile {request.profile!r}; offered: {', '.join(sorted(policy.known_profiles))}")


@dataclass(frozen=True)
class _Candidate:
    site: SiteCapacity
    node: str
    leftover: int
    loss: float
    rank: tuple


def decide(
    request: GPURequest,
    snapshot: Snapshot,
    reservations: Reservations,
    policy: Policy,
) -> Placement | NoCapacity:
    """Choose a site and node for ``request``; never counts a reserved GPU as free."""
    validate_request(request, policy)
    local = snapshot.site(ORIGIN_SITE)
    local_allowed = policy.strategy is not Strategy.DONOR_ONLY and _site_allowed(request, ORIGIN_SITE)
    donors, donor_notes = _eligible_donors(request, snapshot, reservations, policy)

    local_tier = [local] if (local is not None and local_allowed) else []
    if policy.strategy is Strategy.LOCAL_FIRST:
        tiers = [local_tier, donors]
    elif policy.strategy is Strategy.DONOR_FIRST:
        tiers = [donors, local_tier]
    elif policy.strategy is Strategy.LOCAL_ONLY:
        tiers = [local_tier]
    else:
        tiers = [donors]

    for tier in tiers:
        best: _Candidate | None = None
        for site in tier:
            candidate = _best_fit(site, request, snapshot, reservations, policy)
            if candidate is not None and (best is None or candidate.rank < best.rank):
                best = candidate
        if best is not None:
            return Placement(
                site=best.site.site,
                cluster_id=best.site.cluster_id,
                node=best.node if (best.site.is_donor or policy.pin_node) else None,
                resource=request.resource,
                count=request.count,
                reason=_reason(best, request, snapshot, reservations, policy),
                loss=best.loss,
            )
    return NoCapacity(_no_capacity_reason(request, snapshot, reservations, policy, local_allowed, donor_notes))


def _site_allowed(request: GPURequest, site: str) -> bool:
    return request.allowed_sites is None or site in request.allowed_sites


def _eligible_donors(
    request: GPURequest, snapshot: Snapshot, reservations: Reservations, policy: Policy
) -> tuple[list[SiteCapacity], list[str]]:
    """Donor sites this request may use, in policy order, and notes on the ones it may not."""
    notes: list[str] = []
    if policy.strategy is Strategy.LOCAL_ONLY:
        return [], ["donors are off (local-only policy)"]
    over_cap = _cap_violation(request, snapshot, reservations, policy)
    if over_cap:
        return [], [over_cap]
    allowlist: Iterable[str] | None = policy.donor_allowlist
    if request.profile in policy.profile_donors:
        allowlist = policy.profile_donors[request.profile]
    allowed = None if allowlist is None else frozenset(allowlist)
    donors = []
    for site in snapshot.donors():
        if allowed is not None and site.site not in allowed:
            continue
        if not _site_allowed(request, site.site):
            continue
        donors.append(site)
    if not donors and snapshot.donors():
        notes.append(f"no donor is allowed for profile {request.profile!r}" if request.profile else "no donor is allowed")
    return donors, notes


def _cap_violation(request: GPURequest, snapshot: Snapshot, reservations: Reservations, policy: Policy) -> str | None:
    if policy.user_donor_cap is not None:
        held = snapshot.donor_units("user", request.user) + reservations.donor_units("user", request.user)
        if held + request.count > policy.user_donor_cap:
            return f"you already hold {held} donor GPU(s) and the limit per user is {policy.user_donor_cap}"
    for group in sorted(request.groups):
        cap = policy.group_donor_caps.get(group)
        if cap is None:
            continue
        held = snapshot.donor_units("group", group) + reservations.donor_units("group", group)
        if held + request.count > cap:
            return f"group {group!r} already holds {held} donor GPU(s) and its limit is {cap}"
    return None


def _latency(site: SiteCapacity, policy: Policy) -> float:
    if not site.is_donor:
        return 0.0
    return policy.donor_latency.get(site.site, policy.donor_latency_penalty)


def _best_fit(
    site: SiteCapacity, request: GPURequest, snapshot: Snapshot, reservations: Reservations, policy: Policy
) -> _Candidate | None:
    """The node of ``site`` that fits the request and strands the fewest GPUs.

    Unreserved nodes are found through the inventory's free-count buckets (ascending, first hit
    wins); nodes with reservations are few and checked one by one with their reserved units off.
    """
    resource, count = request.resource, request.count
    reserved_nodes = set(reservations.reserved_nodes(site.site, resource))
    best_node, best_free = None, None
    for node in reserved_nodes:
        capacity = snapshot.nodes.get(node)
        if capacity is None or capacity.site != site.site:
            continue
        effective = capacity.free(resource) - reservations.on_node(node, resource)
        if effective >= count and (best_free is None or effective < best_free):
            best_node, best_free = node, effective
    for free in snapshot.free_levels(site.site, resource):
        if free < count:
            continue
        if best_free is not None and free >= best_free:
            break
        node = next((n for n in snapshot.nodes_with_free(site.site, resource, free) if n not in reserved_nodes), None)
        if node is not None:
            best_node, best_free = node, free
            break
    if best_node is None or best_free is None:
        return None
    leftover = best_free - count
    idle_gib = leftover * policy.resource_memory_gib.get(resource, 1.0)
    loss = _latency(site, policy) + policy.idle_memory_weight * idle_gib
    order = policy.donor_order.index(site.site) if site.site in policy.donor_order else len(policy.donor_order)
    return _Candidate(site=site, node=best_node, leftover=leftover, loss=loss, rank=(order, loss, site.site, best_node))


def _free_units(site: SiteCapacity | None, resource: str, reservations: Reservations) -> tuple[int, int]:
    if site is None:
        return 0, 0
    free = max(0, site.free.get(resource, 0) - reservations.on_site(site.site, resource))
    return free, site.allocatable.get(resource, 0)


def _reason(
    chosen: _Candidate, request: GPURequest, snapshot: Snapshot, reservations: Reservations, policy: Policy
) -> str:
    resource, count = request.resource, request.count
    free, total = _free_units(chosen.site, resource, reservations)
    if not chosen.site.is_donor:
        return f"{free} of {total} local {resource} free; starting on the origin (node {chosen.node})."
    local = snapshot.site(ORIGIN_SITE)
    lfree, ltotal = _free_units(local, resource, reservations)
    donor_part = f"starting on donor {chosen.site.site} ({free} of {total} free)."
    if policy.strategy is Strategy.DONOR_FIRST:
        return f"Donor-first policy: {donor_part[0].lower()}{donor_part[1:]}"
    if policy.strategy is Strategy.DONOR_ONLY:
        return f"Donor-only policy: {donor_part}"
    if not _site_allowed(request, ORIGIN_SITE):
        return f"Profile {request.profile!r} runs on donors only; {donor_part}"
    if ltotal == 0:
        return f"No local {resource} on the origin; {donor_part}"
    if lfree >= count:
        return (
            f"Local {resource} busy ({lfree} of {ltotal} free, but no single node has {count} free); "
            f"{donor_part}"
        )
    if lfree == 0:
        return f"All {ltotal} local {resource} busy (0 of {ltotal} free); {donor_part}"
    return f"Local {resource} busy ({lfree} of {ltotal} free, {count} needed); {donor_part}"


def _no_capacity_reason(
    request: GPURequest,
    snapshot: Snapshot,
    reservations: Reservations,
    policy: Policy,
    local_allowed: bool,
    donor_notes: list[str],
) -> str:
    resource, count = request.resource, request.count
    parts: list[str] = []
    local = snapshot.site(ORIGIN_SITE)
    if not local_allowed:
        parts.append("the origin is not allowed for this request")
    elif local is None or not local.allocatable.get(resource):
        parts.append(f"the origin has no {resource}")
    else:
        lfree, ltotal = _free_units(local, resource, reservations)
        parts.append(f"origin: {lfree} of {ltotal} free")
    if policy.strategy is not Strategy.LOCAL_ONLY and not donor_notes:
        donors = snapshot.donors()
        if not donors:
            parts.append("no donor cluster is peered")
        for donor in donors:
            if not donor.ready:
                parts.append(f"donor {donor.site}: not ready")
                continue
            dfree, dtotal = _free_units(donor, resource, reservations)
            parts.append(f"donor {donor.site}: {dfree} of {dtotal} free")
    parts.extend(donor_notes)
    return f"No site can start {count} × {resource} now: " + "; ".join(parts) + "."


class Placer:
    """Decide and reserve in one step: the stateful companion of ``decide`` for one hub."""

    def __init__(self, policy: Policy, ttl_s: float = 300.0) -> None:
        self.policy = policy
        self.reservations = Reservations(ttl_s)

    def place(self, key: str, request: GPURequest, snapshot: Snapshot, now: float, policy: Policy | None = None) -> Placement | NoCapacity:
        """``policy``: a profile's own (its overrides), on the same reservations; default the hub's."""
        self.reservations.expire(now)
        # the spawn's own earlier hold must not block its re-placement
        self.reservations.release(key)
        outcome = decide(request, snapshot, self.reservations, policy or self.policy)
        if isinstance(outcome, Placement):
            self.reservations.reserve(key, outcome, request, now)
        return outcome

    def release(self, key: str) -> None:
        self.reservations.release(key)
