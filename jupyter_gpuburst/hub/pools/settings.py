"""The admin's warm pool settings (``c.WarmPools``), and each pool's shape from the spawner's profiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traitlets import Dict, Float, Int, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.pools.schedule import Window, parse_window, time_zone
from jupyter_gpuburst.hub.spawner.podrequest import pod_spec_from_traits

SECTION = "WarmPools"
# what a profile's kubespawner_override may say about the pod a placeholder stands in for
SHAPE_TRAITS = ("image", "cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit", "extra_resource_guarantees", "extra_resource_limits")
DEFAULT_IMAGE = "quay.io/jupyterhub/singleuser:latest"  # KubeSpawner's own default


PLACEHOLDERS, KERNELS = "placeholders", "kernels"


@dataclass(frozen=True)
class Pool:
    """``count`` placeholders of ``profile`` on ``site`` (``origin`` or a donor's cluster id); of
    kind ``kernels``: pre-started GPU kernels of the GPU kernel profile ``profile``. Up only
    within ``schedule``'s windows where it has any (none: always)."""

    site: str
    profile: str
    count: int
    kind: str = PLACEHOLDERS
    schedule: tuple[Window, ...] = ()

    @property
    def name(self) -> str:
        # a kernel pool's pods are told from a placeholder pool's of the same slug
        return f"{self.site}.{self.profile}" if self.kind == PLACEHOLDERS else f"{self.site}.{self.profile}.{KERNELS}"


@dataclass(frozen=True)
class Shape:
    """What a profile's server pod asks for: a placeholder asks the same and runs its image."""

    image: str
    requests: dict[str, str]
    limits: dict[str, str]


class WarmPools(Configurable):
    """Placeholder pods that keep GPUs ready, per site and per profile."""

    pools = List(
        Dict(),
        config=True,
        help="""The warm pools: a list of {"site": "origin" or a donor's cluster id, "profile":
        the slug of one of the spawner's profiles, "count": placeholders to keep}. Each
        placeholder is a pod of the profile's size and image at a priority below every user pod:
        it pulls the image onto a node and holds the room until a real server or kernel needs it
        (the scheduler preempts it), then the pool refills. An optional "schedule", a list of
        windows like "mon-fri 08:30-09:15" (days: mon-fri, mon,wed, daily or none; times in
        `timezone`), keeps the pool up only then: outside them it holds nothing. Example:
        [{"site": "origin", "profile": "gpu-1", "count": 4, "schedule": ["mon-fri 08:30-09:15"]},
        {"site": "donor-1", "profile": "gpu-1", "count": 8}].""",
    )
    kernels = List(
        Dict(),
        config=True,
        help="""Pre-started GPU kernels (kernel mode): a list of {"site": "origin" or a donor's
        cluster id, "profile": the slug of a GPU kernel profile (GPUKernelSettings.profiles),
        "count": kernels to keep waiting}. Each is a kernel pod of that profile on that site, at
        the placeholders' priority, with ipykernel (and `kernel_preload`) imported and no
        connection yet; the next GPU kernel of that profile placed on that site adopts it (a new
        key, its owner and labels set then), so it is ready in about one round trip to the hub;
        the pool refills. An optional "schedule" as for `pools`. Example:
        [{"site": "origin", "profile": "gpu-1", "count": 2, "schedule": ["mon-fri 08:45-09:15"]}].""",
    )
    timezone = Unicode(
        "UTC",
        config=True,
        help="""The time zone of the pools' schedules: an IANA name like "Europe/Rome" (the
        campus's own, so that a lab at 09:00 stays at 09:00 across daylight saving time).""",
    )
    kernel_preload = List(
        Unicode(),
        ["torch", "cupy", "jax"],
        config=True,
        help="""Modules a pre-started kernel imports while it waits, where its image has them (the
        GPU libraries students import first): the adopter's first `import` is then instant.
        ipykernel is always imported.""",
    )
    priority_class = Unicode(
        "gpuburst-warm-pool",
        config=True,
        help="""The PriorityClass of placeholders on the origin (the hub creates it where it is
        missing, with `priority`, preemptionPolicy Never). Donors need none: Liqo does not carry a
        pod's class to the donor, and a donor's placeholders are preempted on the origin's virtual node.""",
    )
    priority = Int(
        -10,
        config=True,
        help="Its value: below user pods (0 without a class), so that any of them preempts a placeholder.",
    )
    namespace = Unicode(
        "",
        config=True,
        help="Where placeholders live; empty: the spawner's namespace (KubeSpawner.namespace, else 'default').",
    )
    interval_seconds = Float(
        5.0,
        config=True,
        help="How often pools are checked (they are also checked whenever capacity changes, at most this often).",
    )
    pending_seconds = Float(
        15.0,
        config=True,
        help="""A placeholder still unscheduled after this long is removed: its site ran short, and a
        queued placeholder would only wait in the scheduler's queue (it never delays a real pod).""",
    )

    @validate("pools", "kernels")
    def _check_pools(self, proposal: Any) -> list:
        seen = set()
        what = f"WarmPools.{proposal['trait'].name}"
        for i, raw in enumerate(proposal["value"]):
            unknown = set(raw) - {"site", "profile", "count", "schedule"}
            if unknown:
                raise TraitError(f"{what}[{i}]: unknown key {sorted(unknown)[0]!r}; expected site, profile, count, schedule")
            site, profile, count = raw.get("site"), raw.get("profile"), raw.get("count")
            if not isinstance(site, str) or not site or not isinstance(profile, str) or not profile:
                raise TraitError(f"{what}[{i}]: 'site' and 'profile' must be non-empty strings")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise TraitError(f"{what}[{i}]: 'count' must be an integer >= 0, got {count!r}")
            if len(f"{site}.{profile}") > 63:
                raise TraitError(f"{what}[{i}]: '{site}.{profile}' names the pool in a label: at most 63 characters")
            if (site, profile) in seen:
                raise TraitError(f"{what}[{i}]: a second pool for {profile} on {site}")
            seen.add((site, profile))
            windows = raw.get("schedule", [])
            if "schedule" in raw and (not isinstance(windows, list) or not windows):
                raise TraitError(f"{what}[{i}]: 'schedule' must be a non-empty list like [\"mon-fri 08:30-09:15\"]")
            for text in windows:
                try:
                    parse_window(text)
                except ValueError as exc:
                    raise TraitError(f"{what}[{i}]: schedule {exc}") from None
        return proposal["value"]

    @validate("timezone")
    def _check_timezone(self, proposal: Any) -> str:
        try:
            time_zone(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"WarmPools.timezone: {exc}") from None
        return proposal["value"]

    def tz(self) -> Any:
        return time_zone(self.timezone)

    def pool_list(self) -> list[Pool]:
        def windows(p: dict[str, Any]) -> tuple[Window, ...]:
            return tuple(parse_window(text) for text in p.get("schedule", []))

        return [Pool(p["site"], p["profile"], p["count"], schedule=windows(p)) for p in self.pools] + [
            Pool(p["site"], p["profile"], p["count"], KERNELS, windows(p)) for p in self.kernels
        ]


def spawner_values(config: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the spawner's own shape traits, its profile_list) from the hub's config: GPUBurstSpawner's
    section over KubeSpawner's."""
    values: dict[str, Any] = {}
    profiles: list[dict[str, Any]] = []
    for section in ("KubeSpawner", "GPUBurstSpawner"):
        if section not in config:
            continue
        for trait in (*SHAPE_TRAITS, "namespace"):
            if trait in config[section]:
                values[trait] = config[section][trait]
        if "profile_list" in config[section] and isinstance(config[section]["profile_list"], list):
            profiles = config[section]["profile_list"]
    return values, profiles


def profile_shape(slug: str, base: dict[str, Any], profiles: list[dict[str, Any]]) -> Shape:
    """The shape of the profile ``slug``; ``KeyError`` when the spawner has no such profile."""
    profile = next((p for p in profiles if isinstance(p, dict) and p.get("slug") == slug), None)
    if profile is None:
        raise KeyError(slug)
    values = {k: v for k, v in base.items() if k in SHAPE_TRAITS}
    values.update({k: v for k, v in (profile.get("kubespawner_override") or {}).items() if k in SHAPE_TRAITS})
    placed = profile.get("gpuburst") or {}
    if placed.get("resource") and placed.get("count"):
        # a profile that names its GPU to the placement only: the spawner adds it as a limit
        values["extra_resource_limits"] = {**(values.get("extra_resource_limits") or {}), placed["resource"]: str(placed["count"])}
    resources = pod_spec_from_traits(values)["containers"][0]["resources"]
    return Shape(
        image=str(values.get("image") or DEFAULT_IMAGE),
        requests={k: str(v) for k, v in resources["requests"].items()},
        limits={k: str(v) for k, v in resources["limits"].items()},
    )


def pool_labels(pool: Pool) -> dict[str, str]:
    """What marks a placeholder (the inventory counts its room as free; the hub finds its pools by it)."""
    return {
        keys.COMPONENT_LABEL: keys.POOL_COMPONENT,
        keys.POOL_LABEL: pool.name,
        keys.POOL_SITE_LABEL: pool.site,
        keys.POOL_PROFILE_LABEL: pool.profile,
    }
