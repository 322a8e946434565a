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


# KubeSpawner's form selects this value when the user picks "Other..." and types a value into
# the free-form field sent as ``<option>--unlisted-choice``
UNLISTED_CHOICE = "unlisted-choice"
UNLISTED_SUFFIX = "--unlisted-choice"
# Echoed user input is cut here: a 1 MB profile name must not make a 1 MB error or log line.
ECHO_LIMIT = 80


def shorten(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``repr`` of untrusted input, cut to ``limit`` characters with an ellipsis."""
    text = repr(value) if not isinstance(value, str) else repr(value[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _names(values: Any, limit: int = 5) -> str:
    values = list(values)
    shown = ", ".join(shorten(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def validate_user_options(user_options: Any, profile_list: list[dict[str, Any]], log: Any = None) -> None:
    """Raise UserOptionsError unless ``user_options`` only picks among what is offered.

    ``profile_list`` must be KubeSpawner-initialized (slugs filled in, defaults chosen). Unlisted
    choices follow KubeSpawner 7 (``_validate_user_options``/``_load_profile``): a non-empty
    ``<option>--unlisted-choice`` value wins over the listed choice, must be enabled for the
    option, and must match its ``validation_regex`` with ``re.match``. Echoed input is cut to
    ``ECHO_LIMIT`` characters, in the error and in the log line ``log`` gets.
    """
    try:
        _validate(user_options, profile_list)
    except UserOptionsError as exc:
        if log is not None:
            log.warning("Refused user_options: %s", exc.message)
        raise


def _validate(user_options: Any, profile_list: list[dict[str, Any]]) -> None:
    if user_options is None:
        return
    if not isinstance(user_options, Mapping):
        raise UserOptionsError(f"user_options must be an object, not {type(user_options).__name__}")
    if not user_options:
        return
    if not profile_list:
        raise UserOptionsError(f"this hub offers no profiles, so no options may be given (got {_names(sorted(map(str, user_options)))})")
    slug = user_options.get("profile")
    if slug is not None and not isinstance(slug, str):
        raise UserOptionsError("user_options 'profile' must be a profile slug (a string)")
    offered = {p["slug"]: p for p in profile_list}
    if slug:
        if slug not in offered:
            raise UserOptionsError(f"unknown profile {shorten(slug)}; offered: {_names(offered, 10)}")
        profile = offered[slug]
    else:
        profile = next(p for p in profile_list if p.get("default"))
    options: Mapping[str, Any] = profile.get("profile_options") or {}
    where = f"profile {shorten(profile['slug'])}"
    offers = _names(sorted(options), 10) if options else "no options"
    allowed = {"profile"} | set(options) | {f"{name}{UNLISTED_SUFFIX}" for name in options}
    unknown = sorted(str(k) for k in user_options if k not in allowed)
    if unknown:
        privileged = [k for k in unknown if PRIVILEGED_KEYS.search(k)]
        if privileged:
            raise UserOptionsError(
                f"user_options may not set {_names(privileged)}: placement, images and "
                f"resources come from the profile you pick ({where} offers: {offers})"
            )
        raise UserOptionsError(f"unknown option(s) {_names(unknown)} for {where}; it offers: {offers}")
    for name, option in options.items():
        _check_option(name, option, user_options, where)


def _check_option(name: str, option: Mapping[str, Any], user_options: Mapping[str, Any], where: str) -> None:
    choice = user_options.get(name)
    unlisted = user_options.get(f"{name}{UNLISTED_SUFFIX}")
    if unlisted is not None and not isinstance(unlisted, str):
        raise UserOptionsError(f"option {shorten(name)}: an unlisted choice must be a string")
    if choice not in (None, "") and not isinstance(choice, str):
        raise UserOptionsError(f"option {shorten(name)} must be the slug of a choice (a string)")
    unlisted_config = option.get("unlisted_choice") or {}
    if unlisted:
        if not unlisted_config.get("enabled"):
            raise UserOptionsError(f"option {shorten(name)} of {where} takes no unlisted choice, only one of its listed choices")
        pattern = unlisted_config.get("validation_regex")
        if pattern and not re.match(pattern, unlisted):
            hint = unlisted_config.get("validation_message") or f"it must match {pattern}"
            raise UserOptionsError(f"{shorten(unlisted)} is not allowed for option {shorten(name)}: {hint}")
        return
    if not choice:
        return
    choices = option.get("choices") or {}
    if choice == UNLISTED_CHOICE and unlisted_config.get("enabled"):
        label = unlisted_config.get("display_name_in_choices") or "Other..."
        raise UserOptionsError(f"option {shorten(name)}: {label!r} was chosen without a value")
    if choice not in choices:
        raise UserOptionsError(
            f"unknown choice {shorten(choice)} for option {shorten(name)} of {where}; offered: {_names(choices, 10) or 'none'}"
        )


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


def gpu_from_resources(limits: Mapping[str, Any], guarantees: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> ProfileGPU | None:
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
