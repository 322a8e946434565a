"""What the spawn form says about each profile: its GPU request and live availability.

Every profile is judged from the configured base resources (the class config), never from the
values a previous spawn's profile override left on the spawner: after a refused 2-GPU spawn,
"CPU only" is still CPU only and a MIG profile still asks for one MIG slice only.
"""

from __future__ import annotations

from typing import Any, Callable

from traitlets.config import Config

from jupyter_gpuburst.core import keys, names
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, PlacementInputError, Policy, decide
from jupyter_gpuburst.hub.accounting.rightsizing import Offer
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.profiles.options import ProfileGPU, gpu_from_resources, profile_block
from jupyter_gpuburst.hub.queue import classes as lab_classes
from jupyter_gpuburst.hub.spawner.podrequest import RESOURCE_TRAITS, pod_spec_from_traits, request_of_pod

# Most specific last: traitlets lets a subclass's section override its parents'.
CONFIG_SECTIONS = ("Spawner", "KubeSpawner", "GPUBurstSpawner")


def configured(config: Config, trait: str) -> Any:
    """The value ``trait`` has in the hub's config before any profile override (None if unset)."""
    value = None
    for section in CONFIG_SECTIONS:
        part = config.get(section)
        if part is not None and trait in part:
            value = part[trait]
    return value


def configured_resources(config: Config) -> dict[str, Any]:
    """The configured base of every trait that shapes the pod's resource requests."""
    return {name: configured(config, name) for name in RESOURCE_TRAITS}


def profile_resources(
    profile: dict[str, Any], base: dict[str, Any], gpu: ProfileGPU | None, tracks: Callable[[str], bool]
) -> dict[str, int]:
    """Everything the pod of ``profile`` would request (CPU, memory, GPUs...), as placement counts it."""
    if gpu is None:
        return {}
    override = profile.get("kubespawner_override") or {}
    values = {name: override.get(name, base.get(name)) for name in RESOURCE_TRAITS}
    for trait in ("extra_resource_limits", "extra_resource_guarantees"):
        values[trait] = {**(base.get(trait) or {}), **(override.get(trait) or {}), gpu.resource: gpu.count}
    demand = request_of_pod(pod_spec_from_traits(values), tracks)
    return dict(demand.resources) if demand is not None else {}


def profile_gpu(
    profile: dict[str, Any], base_limits: dict[str, Any], base_guarantees: dict[str, Any], tracks: Callable[[str], bool]
) -> ProfileGPU | None:
    """The GPU request a profile would make, without applying it to a spawner."""
    block = profile_block(profile)
    if block is not None:
        return block
    override = profile.get("kubespawner_override") or {}
    limits = {**base_limits, **(override.get("extra_resource_limits") or {})}
    guarantees = {**base_guarantees, **(override.get("extra_resource_guarantees") or {})}
    return gpu_from_resources(limits, guarantees, tracks)


def availability(
    gpu: ProfileGPU,
    slug: str,
    user: Any,
    tracker: CapacityTracker,
    resources: dict[str, int] | None = None,
    policy: Policy | None = None,
    queues: bool = False,
) -> dict[str, Any]:
    """Free units per site now and where a spawn of this profile would land (nothing reserved).

    ``queues``: a spawn that finds no room waits in line (``queue_when_full``), so a profile
    full now can still be started; one that never fits cannot.

    ``resources`` is the whole pod (CPU, memory...), so "would start on" and "full" account for
    it as the spawn itself will; ``policy`` is the profile's own when its overrides change the
    hub's. ``full`` means the profile cannot start now; ``never`` that no
    allowed node is big enough, so waiting will not help either.
    """
    snapshot = tracker.snapshot()
    sites = []
    for name in sorted(snapshot.sites, key=lambda s: (s != keys.ORIGIN_SITE, s)):
        site = snapshot.sites[name]
        totals = site.total(gpu.resource)
        if not totals.allocatable and site.is_donor:
            continue  # a donor that grants none of this resource says nothing useful here
        # free already leaves out what spawns in flight hold
        sites.append({"site": name, "free": totals.free, "total": totals.allocatable})
    groups = frozenset(getattr(g, "name", str(g)) for g in (getattr(user, "groups", None) or []))
    request = GPURequest(gpu.resource, gpu.count, user.name, groups, slug, gpu.allowed_sites, resources=dict(resources or {}))
    try:
        outcome: Placement | NoCapacity = decide(request, snapshot, policy or tracker.placer.policy)
    except PlacementInputError as exc:
        outcome = NoCapacity(str(exc), never=True)
    hold = lab_classes.hold_for(request)
    if isinstance(outcome, Placement):
        outcome = lab_classes.refusal(request, lambda: [(s["site"], s["free"]) for s in sites]) or outcome
    wanted = names.gpu_amount(gpu.resource, gpu.count)
    free_text = ", ".join(f"{s['site']} {s['free']} of {s['total']}" for s in sites) or "no site has any"
    common = {"resource": gpu.resource, "resource_name": names.gpu_name(gpu.resource), "count": gpu.count, "sites": sites}
    if isinstance(outcome, Placement):
        summary = f"{wanted}. Free now: {free_text}. Would start on {names.site_name(outcome.site)}."
        if hold is not None:
            summary += f" {hold.sentence}"
        return {"full": False, "never": False, "target": outcome.site, "summary": summary, **common}
    label = "Never fits" if outcome.never else "Full now"
    summary = f"{label}: {outcome.reason}"
    queued = queues and not outcome.never
    if queued:
        waiting = tracker.queue_length
        summary += f" Start waits in line for a GPU ({waiting} waiting now)." if waiting else " Start waits in line for a GPU."
    return {
        "full": True,
        "never": outcome.never,
        "queues": queued,
        "target": None,
        "reason": outcome.reason,
        "summary": summary,
        **common,
    }


def annotate(
    profile: dict[str, Any],
    base: dict[str, Any],
    tracks: Callable[[str], bool],
    user: Any,
    tracker: CapacityTracker | None,
    policy: Policy | None = None,
    queues: bool = False,
) -> dict[str, Any]:
    """A copy of ``profile`` with ``gpuburst_status`` and the availability in its description.

    ``base`` holds the configured resource traits (``configured_resources``); ``queues`` as
    for ``availability``.
    """
    out = dict(profile)
    try:
        limits = dict(base.get("extra_resource_limits") or {})
        guarantees = dict(base.get("extra_resource_guarantees") or {})
        gpu = profile_gpu(profile, limits, guarantees, tracks)
        resources = profile_resources(profile, base, gpu, tracks)
    except ValueError as exc:
        out["gpuburst_status"] = {"full": True, "never": True, "summary": f"Misconfigured: {exc}"}
        return out
    if gpu is None or tracker is None:
        return out
    status = availability(gpu, profile.get("slug", ""), user, tracker, resources, policy, queues)
    out["gpuburst_status"] = status
    description = out.get("description") or ""
    out["description"] = f"{description} {status['summary']}".strip()
    return out


def offers(profile_list: list[dict[str, Any]], config: Config, tracks: Callable[[str], bool]) -> list[Offer]:
    """The GPU profiles of the spawn form as right-sizing compares them (CPU ones and
    misconfigured ones left out: the form says what is wrong with those)."""
    base = configured_resources(config)
    out = []
    for profile in profile_list:
        try:
            gpu = profile_gpu(profile, base.get("extra_resource_limits") or {}, base.get("extra_resource_guarantees") or {}, tracks)
        except ValueError:
            continue
        if gpu is not None:
            slug = str(profile.get("slug") or profile.get("display_name") or "")
            out.append(Offer(slug, str(profile.get("display_name") or slug), gpu.resource, gpu.count))
    return out
