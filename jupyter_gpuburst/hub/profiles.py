"""What a user may ask for, and what GPU request a chosen profile makes.

``user_options`` arrive from a form or straight from the REST API, so they are untrusted: they
may only pick one of the offered profiles and one of that profile's offered choices. Anything
else (node selectors, tolerations, images, GPU counts, sites) is refused before anything is made.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tornado import web

from jupyter_gpuburst.core.inventory import parse_count

PROFILE_BLOCK = "gpuburst"
# Keys that name something only the admin's profiles decide; named in the error so a user who
# tries them learns why, not just that the key is unknown.
PRIVILEGED_KEYS = re.compile(
    r"node|toleration|affinity|image|resource|limit|guarantee|gpu|count|site|cluster|donor|"
    r"namespace|override|privileged|volume|env|cmd|command|uid|gid|security|scheduler|priority",
    re.IGNORECASE,
)


class UserOptionsError(web.HTTPError):
    """A 400 with a message the hub shows to the user as is."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "%s", message, reason="Bad user_options")
        self.message = message
        self.jupyterhub_message = message

    def __str__(self) -> str:
        return self.message


def validate_user_options(user_options: Any, profile_list: list[dict[str, Any]]) -> None:
    """Raise UserOptionsError unless ``user_options`` only picks among what is offered.

    ``profile_list`` must be KubeSpawner-initialized (slugs filled in, defaults chosen).
    """
    if user_options is None:
        return
    if not isinstance(user_options, Mapping):
        raise UserOptionsError(f"user_options must be an object, not {type(user_options).__name__}")
    if not user_options:
        return
    if not profile_list:
        raise UserOptionsError(
            f"this hub offers no profiles, so no options may be given (got {', '.join(map(repr, sorted(user_options)))})"
        )
    slug = user_options.get("profile")
    if slug is not None and not isinstance(slug, str):
        raise UserOptionsError("user_options 'profile' must be a profile slug (a string)")
    offered = {p["slug"]: p for p in profile_list}
    if slug:
        if slug not in offered:
            raise UserOptionsError(f"unknown profile {slug!r}; offered: {', '.join(offered)}")
        profile = offered[slug]
    else:
        profile = next(p for p in profile_list if p.get("default"))
    options: Mapping[str, Any] = profile.get("profile_options") or {}
    allowed = {"profile"} | set(options)
    allowed |= {f"{name}--unlisted-choice" for name, opt in options.items() if (opt.get("unlisted_choice") or {}).get("enabled")}
    unknown = sorted(str(k) for k in user_options if k not in allowed)
    if unknown:
        privileged = [k for k in unknown if PRIVILEGED_KEYS.search(k)]
        if privileged:
            raise UserOptionsError(
                f"user_options may not set {', '.join(map(repr, privileged))}: placement, images and "
                f"resources come from the profile you pick (profile {profile['slug']!r} offers: "
                f"{', '.join(sorted(options)) or 'no options'})"
            )
        raise UserOptionsError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for profile {profile['slug']!r}; "
            f"it offers: {', '.join(sorted(options)) or 'no options'}"
        )
    for name, option in options.items():
        choice = user_options.get(name)
        if choice is None or choice == "":
            continue
        if not isinstance(choice, str):
            raise UserOptionsError(f"option {name!r} must be the slug of a choice (a string)")
        choices = option.get("choices") or {}
        if choice not in choices:
            raise UserOptionsError(
                f"unknown choice {choice!r} for option {name!r} of profile {profile['slug']!r}; "
                f"offered: {', '.join(choices) or 'none'}"
            )
    for name in options:
        unlisted = user_options.get(f"{name}--unlisted-choice")
        if unlisted is not None and not isinstance(unlisted, str):
            raise UserOptionsError(f"option {name!r}: an unlisted choice must be a string")


@dataclass(frozen=True)
class ProfileGPU:
    """The GPU part of a profile: what to request and where it may run."""

    resource: str
    count: int
    allowed_sites: tuple[str, ...] | None = None


def profile_block(profile: Mapping[str, Any] | None) -> ProfileGPU | None:
    """The explicit ``gpuburst`` block of a profile, checked; None when there is none."""
    if not profile or PROFILE_BLOCK not in profile:
        return None
    block = profile[PROFILE_BLOCK]
    where = f"profile {profile.get('slug') or profile.get('display_name')!r}"
    if not isinstance(block, Mapping):
        raise ValueError(f"{where}: '{PROFILE_BLOCK}' must be a mapping with resource, count, allowed_sites")
    unknown = set(block) - {"resource", "count", "allowed_sites"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) in '{PROFILE_BLOCK}': {', '.join(sorted(unknown))}")
    resource = block.get("resource", "nvidia.com/gpu")
    if not isinstance(resource, str) or not resource:
        raise ValueError(f"{where}: '{PROFILE_BLOCK}.resource' must be a resource name")
    try:
        count = parse_count(block.get("count", 1))
    except ValueError as exc:
        raise ValueError(f"{where}: '{PROFILE_BLOCK}.count': {exc}") from None
    sites = block.get("allowed_sites")
    if sites is not None:
        if isinstance(sites, str) or not all(isinstance(s, str) and s for s in sites):
            raise ValueError(f"{where}: '{PROFILE_BLOCK}.allowed_sites' must be a list of site names")
        sites = tuple(sites)
    return ProfileGPU(resource=resource, count=count, allowed_sites=sites)


def gpu_from_resources(
    limits: Mapping[str, Any], guarantees: Mapping[str, Any], is_gpu: Callable[[str], bool]
) -> ProfileGPU | None:
    """The GPU request a spawner's extra resource limits/guarantees make, or None (CPU only).

    Kubernetes requires extended-resource requests to equal limits; the larger is taken so a
    misconfigured profile is never under-counted.
    """
    found: dict[str, int] = {}
    for source in (limits or {}, guarantees or {}):
        for resource, value in source.items():
            if is_gpu(resource):
                count = parse_count(value)
                if count > 0:
                    found[resource] = max(found.get(resource, 0), count)
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(f"a server may request one GPU resource, not {', '.join(sorted(found))}")
    resource, count = next(iter(found.items()))
    return ProfileGPU(resource=resource, count=count)
