"""Where a GPU server should run: a pure function of request, inventory snapshot and policy.

No Kubernetes client, no JupyterHub, no I/O: everything arrives as arguments, so the policy can
be tested exhaustively and benchmarked alone. The spawner turns a ``Placement`` into pod fields.

A site is considered only when one of its nodes takes the whole pod: its GPUs and every other
resource it requests (CPU, memory, ephemeral storage, a pod slot), against allocatable minus what
pods request minus what other in-flight spawns hold. Reservations live in the inventory itself
(``Inventory.hold``), so the snapshot already counts them and the best-fit lookup costs the same
with 0 or 2,000 spawns in flight.

Ordering, from strongest to weakest:
1. the strategy's tiers (local-first tries the origin before any donor, and so on);
2. an admin's ordered donor list (earlier donors first);
3. the loss  ``a * latency + b * idle GPU memory``  (the heuristic-allocation paper's score):
   latency is 0 on the origin and ``donor_latency_penalty`` (or a per-donor value) on a donor;
   idle memory is what the chosen node would leave stranded, so the smallest slice that fits
   wins (best fit) and GPUs stay together for larger requests.

Inside the chosen site, among the nodes that strand as few GPUs, one that already has the pod's
images wins (kube-scheduler's ImageLocality, which our pinned pods never reach): a bounded look
(``fitindex.IMAGE_SCAN``), and never a reason to pick another site.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from . import keys, liqo, reasons
from .inventory import DEFAULT_RESOURCE_NAMES, DEFAULT_RESOURCE_PREFIXES, Inventory, SiteCapacity, Snapshot
from .quantities import COMPUTE_RESOURCES, PODS

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
    """One pod to place: its GPUs, who asks, and everything else it requests.

    ``resources`` is the pod's whole effective request in placement units (``quantities``):
    ``cpu`` in millicores, ``memory``/``ephemeral-storage`` in bytes. The GPU entry and the pod
    slot are implied by ``resource``/``count``; empty means "GPUs only".
    """

    resource: str
    count: int
    user: str
    groups: frozenset[str] = frozenset()
    profile: str = ""
    # None: any site the policy allows; otherwise only these site names ("origin" or donor ids)
    allowed_sites: tuple[str, ...] | None = None
    resources: Mapping[str, int] = field(default_factory=dict, hash=False)
    # the pod's images, normalized (``images.pod_images``): among nodes that strand as few GPUs,
    # one that already has them is chosen, so the student does not wait for a pull
    images: tuple[str, ...] = ()

    def demand(self) -> dict[str, int]:
        """Everything one node must have free for this pod (call after ``validate_request``)."""
        demand = {r: v for r, v in self.resources.items() if v}
        demand[self.resource] = self.count
        demand[PODS] = 1
        return demand


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
    # the whole pod, as placed and held (see GPURequest.demand)
    resources: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)
    # the node whose capacity the reservation holds: ``node``, or the best fit when not pinned
    held_node: str | None = field(default=None, compare=False)

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
    # True when no allowed node could ever hold the request (bigger than any node's allocatable):
    # waiting cannot help, unlike a full site that frees up when servers stop.
    never: bool = False


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
    resources: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)


class Reservations:
    """The ledger of spawns in flight, so two spawns never count the same free capacity.

    Taken at decision time; released when the pod is bound (the inventory then counts the pod)
    or the spawn fails; expired after ``ttl_s`` so a crashed spawn cannot leak capacity. What a
    reservation holds is counted in ``inventory`` like a pod on its node, every resource of it.
    Every operation is O(resources) except expiry, which is O(log n) per expired entry.
    """

    def __init__(self, inventory: Inventory, ttl_s: float = 300.0) -> None:
        if ttl_s <= 0:
            raise ValueError(f"reservation ttl must be positive, not {ttl_s}")
        self.inventory = inventory
        self.ttl_s = ttl_s
        self._by_key: dict[str, Reservation] = {}
        self._owner_donor_units: dict[tuple[str, str], int] = {}
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
        resources = dict(placement.resources) or {placement.resource: placement.count, PODS: 1}
        reservation = Reservation(
            key=key,
            site=placement.site,
            node=placement.held_node or placement.node,
            resource=placement.resource,
            count=placement.count,
            user=request.user,
            groups=frozenset(request.groups),
            expires_at=now + self.ttl_s,
            resources=resources,
        )
        self._by_key[key] = reservation
        if reservation.node is not None:
            donor = reservation.site if reservation.site != ORIGIN_SITE else None
            self.inventory.hold(key, reservation.node, resources, donor_site=donor, user=request.user, groups=request.groups)
        self._owners(reservation, +1)
        heapq.heappush(self._expiry, (reservation.expires_at, next(self._tiebreak), key))
        return reservation

    def release(self, key: str) -> Reservation | None:
        reservation = self._by_key.pop(key, None)
        if reservation is not None:
            self.inventory.release_hold(key)
            self._owners(reservation, -1)
        return reservation

    def expire(self, now: float) -> list[Reservation]:
        expired = []
        while self._expiry and self._expiry[0][0] <= now:
            expires_at, _n, key = heapq.heappop(self._expiry)
            current = self._by_key.get(key)
            if current is not None and current.expires_at == expires_at:
                expired.append(self.release(key))
        return expired  # type: ignore[return-value]

    def _owners(self, r: Reservation, sign: int) -> None:
        if r.site == ORIGIN_SITE:
            return
        for owner in [("user", r.user)] + [("group", g) for g in r.groups]:
            value = self._owner_donor_units.get(owner, 0) + sign * r.count
            if value:
                self._owner_donor_units[owner] = value
            else:
                self._owner_donor_units.pop(owner, None)

    def on_node(self, node: str, resource: str) -> int:
        capacity = self.inventory.snapshot().nodes.get(node)
        return capacity.reserved.get(resource, 0) if capacity is not None else 0

    def on_site(self, site: str, resource: str) -> int:
        capacity = self.inventory.snapshot().site(site)
        return capacity.total(resource).reserved if capacity is not None else 0

    def donor_units(self, kind: str, name: str) -> int:
        """Donor GPU units held by this ledger alone (the snapshot counts them as well)."""
        return self._owner_donor_units.get((kind, name), 0)


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
    if type(request.images) is not tuple:
        raise PlacementInputError("a request's images must be a tuple of image names")
    for image in request.images:  # a loop, not all(): every decision passes here twice
        if not isinstance(image, str):
            raise PlacementInputError("a request's images must be a tuple of image names")
    if not isinstance(request.resources, Mapping):
        raise PlacementInputError(f"a request's resources must be a mapping, not {type(request.resources).__name__}")
    for resource, amount in request.resources.items():
        if not isinstance(resource, str) or not (resource in COMPUTE_RESOURCES or policy.knows_resource(resource)):
            counted = ", ".join([*COMPUTE_RESOURCES, *sorted(policy.resource_names), *(p + "*" for p in policy.resource_prefixes)])
            raise UnknownResource(f"the pod requests {resource!r}, which placement does not count (it counts {counted})")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidCount(f"the request for {resource} must be a whole number of units >= 0, not {amount!r}")
        if resource in COMPUTE_RESOURCES:
            continue
        if resource != request.resource and amount:
            raise PlacementInputError(f"a server may request one GPU resource, not {request.resource} and {resource}")
        if resource == request.resource and amount != request.count:
            raise InvalidCount(f"the pod requests {amount} {resource} but the request says {request.count}")


@dataclass(frozen=True)
class _Candidate:
    site: SiteCapacity
    node: str
    leftover: int
    loss: float
    rank: tuple
    has_image: bool = False


def decide(request: GPURequest, snapshot: Snapshot, policy: Policy) -> Placement | NoCapacity:
    """Choose a site and node for ``request``; never counts held or requested capacity as free."""
    validate_request(request, policy)
    demand = request.demand()
    local = snapshot.site(ORIGIN_SITE)
    local_allowed = policy.strategy is not Strategy.DONOR_ONLY and _site_allowed(request, ORIGIN_SITE)
    donors, donor_notes = _eligible_donors(request, snapshot, policy)

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
            candidate = _best_fit(site, request, demand, snapshot, policy)
            if candidate is not None and (best is None or candidate.rank < best.rank):
                best = candidate
        if best is not None:
            pinned = best.site.is_donor or policy.pin_node
            return Placement(
                site=best.site.site,
                cluster_id=best.site.cluster_id,
                node=best.node if pinned else None,
                resource=request.resource,
                count=request.count,
                reason=reasons.placed(best.site, best.node, request, demand, snapshot, policy.strategy.value, best.has_image),
                loss=best.loss,
                resources=demand,
                held_node=best.node,
            )
    return NoCapacity(*reasons.no_capacity(request, demand, snapshot, policy.strategy.value, local_allowed, donor_notes))


def _site_allowed(request: GPURequest, site: str) -> bool:
    return request.allowed_sites is None or site in request.allowed_sites


def _eligible_donors(request: GPURequest, snapshot: Snapshot, policy: Policy) -> tuple[list[SiteCapacity], list[str]]:
    """Donor sites this request may use, in policy order, and notes on the ones it may not."""
    notes: list[str] = []
    if policy.strategy is Strategy.LOCAL_ONLY:
        return [], ["donors are off (local-only policy)"]
    over_cap = _cap_violation(request, snapshot, policy)
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


def _cap_violation(request: GPURequest, snapshot: Snapshot, policy: Policy) -> str | None:
    # the snapshot counts donor GPUs of running pods and of reservations alike
    if policy.user_donor_cap is not None:
        held = snapshot.donor_units("user", request.user)
        if held + request.count > policy.user_donor_cap:
            return f"you already hold {held} donor GPU(s) and the limit per user is {policy.user_donor_cap}"
    for group in sorted(request.groups):
        cap = policy.group_donor_caps.get(group)
        if cap is None:
            continue
        held = snapshot.donor_units("group", group)
        if held + request.count > cap:
            return f"group {group!r} already holds {held} donor GPU(s) and its limit is {cap}"
    return None


def _latency(site: SiteCapacity, policy: Policy) -> float:
    if not site.is_donor:
        return 0.0
    return policy.donor_latency.get(site.site, policy.donor_latency_penalty)


def _best_fit(site: SiteCapacity, request: GPURequest, demand: Mapping[str, int], snapshot: Snapshot, policy: Policy) -> _Candidate | None:
    """The node of ``site`` that takes the whole pod and strands the fewest GPUs (of those, one
    that already has the pod's images)."""
    found = snapshot.best_fit(site.site, request.resource, demand, request.images)
    if found is None:
        return None
    node, free, has_image = found
    leftover = free - request.count
    idle_gib = leftover * policy.resource_memory_gib.get(request.resource, 1.0)
    loss = _latency(site, policy) + policy.idle_memory_weight * idle_gib
    order = policy.donor_order.index(site.site) if site.site in policy.donor_order else len(policy.donor_order)
    return _Candidate(site=site, node=node, leftover=leftover, loss=loss, rank=(order, loss, site.site, node), has_image=has_image)


class Placer:
    """Decide and reserve in one step, against one inventory: the stateful side of one hub."""

    def __init__(self, policy: Policy, inventory: Inventory, ttl_s: float = 300.0) -> None:
        self.policy = policy
        self.inventory = inventory
        self.reservations = Reservations(inventory, ttl_s)

    def place(self, key: str, request: GPURequest, now: float, policy: Policy | None = None) -> Placement | NoCapacity:
        """Place ``request`` on the inventory as it is now and hold what it needs under ``key``.

        ``policy``: a profile's own (its overrides), on the same reservations; default the hub's.
        """
        policy = policy or self.policy
        validate_request(request, policy)
        self.reservations.expire(now)
        # the spawn's own earlier hold must not block its re-placement
        self.reservations.release(key)
        outcome = decide(request, self.inventory.snapshot(), policy)
        if isinstance(outcome, Placement):
            self.reservations.reserve(key, outcome, request, now)
        return outcome

    def release(self, key: str) -> None:
        self.reservations.release(key)
