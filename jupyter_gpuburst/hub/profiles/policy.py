"""Placement settings per profile: which traits a profile's ``kubespawner_override`` may set.

KubeSpawner applies a profile's ``kubespawner_override`` to the spawner's traits. Traits the
spawner reads itself (``storage_policy``, ``max_redirects``, ...) take effect that way. Traits
that shape the placement Policy (``strategy``, ``donor_order``, ...) are turned into a Policy
for that one spawn here. A few traits belong to the hub's one inventory and ledger and cannot
differ per profile: a profile that sets one is refused when the hub starts (``install(c)``) and
at spawn, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuburst.core.placement import Policy
from jupyter_gpuburst.hub.settings import GPUBurstSettings

# Shape the Policy: per profile through policy_for().
POLICY_TRAITS = (
    "strategy",
    "donor_order",
    "donor_allowlist",
    "user_donor_cap",
    "group_donor_caps",
    "donor_latency_penalty",
    "donor_latency",
    "idle_memory_weight",
    "resource_memory_gib",
    "max_gpus_per_server",
    "pin_local_node",
)
# What the hub's single inventory, reservation ledger and per-profile tables are built from.
HUB_WIDE_TRAITS = {
    "gpu_resource_names": "the inventory counts one set of GPU resources for the whole hub",
    "gpu_resource_prefixes": "the inventory counts one set of GPU resources for the whole hub",
    "reservation_ttl_seconds": "one reservation ledger serves every profile",
    "profile_donors": "it is already a table of profiles",
}


class ProfilePolicyError(ValueError):
    """A profile sets a trait that cannot differ per profile."""


def _overrides(profile: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    yield "", profile.get("kubespawner_override") or {}
    for option_name, option in (profile.get("profile_options") or {}).items():
        for choice_name, choice in (option.get("choices") or {}).items():
            yield f" option {option_name}={choice_name}", choice.get("kubespawner_override") or {}
        unlisted = option.get("unlisted_choice") or {}
        yield f" option {option_name} (unlisted choice)", unlisted.get("kubespawner_override") or {}


def check_profiles(profile_list: Any) -> None:
    """Raise ProfilePolicyError naming every hub-wide trait a profile sets; a callable
    ``profile_list`` is checked when it is called, at spawn."""
    if not isinstance(profile_list, list | tuple):
        return
    problems = []
    for profile in profile_list:
        if not isinstance(profile, Mapping):
            continue
        name = profile.get("slug") or profile.get("display_name") or "?"
        for where, override in _overrides(profile):
            for trait in sorted(set(override) & set(HUB_WIDE_TRAITS)):
                problems.append(
                    f"profile {name!r}{where} sets {trait} in kubespawner_override, but {HUB_WIDE_TRAITS[trait]}: "
                    f"set c.GPUBurstSpawner.{trait} instead"
                )
    if problems:
        raise ProfilePolicyError("; ".join(problems))


def policy_for(base: GPUBurstSettings, values: Mapping[str, Any], known_profiles: frozenset[str] | None = None) -> Policy | None:
    """The Policy for one spawn whose Policy traits have ``values`` (a spawner's own, after its
    profile's overrides), or None when they equal the hub's (``base``): the shared policy applies."""
    changed = {name: values[name] for name in POLICY_TRAITS if name in values and values[name] != getattr(base, name)}
    if not changed:
        return None
    settings = GPUBurstSettings(**{name: getattr(base, name) for name in base.trait_names(config=True)})
    for name, value in changed.items():
        setattr(settings, name, value)  # validated like config
    return settings.policy(known_profiles)
