"""What an admin configures about GPU idle culling: timeouts, threshold, warnings, per profile."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, validate
from traitlets.config import Config, Configurable

# the keys a per-profile override may set, and the trait each one overrides
OVERRIDES = (
    "timeout_seconds",
    "donor_timeout_seconds",
    "threshold",
    "warning_seconds",
    "max_age_seconds",
    "silent_seconds",
    "keep_limit",
    "exempt_groups",
    "enabled",
)


@dataclass(frozen=True)
class CullPolicy:
    """The culling rule of one server profile or GPU kernel profile."""

    enabled: bool
    timeout_s: float
    donor_timeout_s: float
    threshold: float
    warning_s: float
    max_age_s: float
    keep_limit: int
    exempt_groups: frozenset[str]
    silent_s: float = 1800.0

    def timeout_for(self, site_kind: str) -> float:
        """Idle seconds before a stop; a donor's GPU is borrowed, so it may go back sooner."""
        if site_kind == "donor" and self.donor_timeout_s > 0:
            return min(self.timeout_s, self.donor_timeout_s)
        return self.timeout_s

    def public(self, site_kind: str = "origin") -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "timeout_s": self.timeout_for(site_kind),
            "threshold": self.threshold,
            "warning_s": self.warning_s,
            "max_age_s": self.max_age_s,
            "silent_s": self.silent_s,
            "keep_limit": self.keep_limit,
        }


class GPUCullingSettings(Configurable):
    """GPU idle culling: a server or GPU kernel whose GPUs sat idle too long is stopped, after a
    warning in the Lab panel with a one-click keep. Off by default."""

    enabled = Bool(
        False,
        help="""Stop servers and GPU kernels whose GPUs were idle longer than
        ``timeout_seconds``. Only GPUs count: a server without a GPU is never stopped by this
        culler (JupyterHub's idle culler handles those), and an open browser tab is no GPU
        activity. A server or kernel that stops reporting is unknown, never idle, and is kept
        until ``silent_seconds``, ``max_age_seconds`` or its user's budget stops it.""",
    ).tag(config=True)

    timeout_seconds = Float(
        3600.0,
        help="""Seconds a GPU may sit idle (utilization under ``threshold`` and no kernel
        executing) before its server or GPU kernel is stopped.""",
    ).tag(config=True)

    donor_timeout_seconds = Float(
        0.0,
        help="""A shorter timeout for servers and kernels on a donor (0: ``timeout_seconds``):
        donors lend their GPUs, so theirs go back before the origin's.""",
    ).tag(config=True)

    threshold = Float(
        0.05,
        help="""Utilization (0-1) over which a GPU counts as busy. Where NVML reads no
        utilization (some MIG slices without GPM), memory activity and kernel execution
        decide, and the Lab panel says so.""",
    ).tag(config=True)

    warning_seconds = Float(
        600.0,
        help="""Seconds before a stop that the Lab panel and status bar warn, with a Keep button
        that counts as GPU activity.""",
    ).tag(config=True)

    max_age_seconds = Float(
        0.0,
        help="""Stop GPU servers and kernels older than this, busy or not, after the same
        warning (0: no maximum age). Keep does not extend a maximum age.""",
    ).tag(config=True)

    silent_seconds = Float(
        1800.0,
        help="""Stop a GPU server or kernel whose server has not reported its GPU activity for
        this long, busy or not, after the same warning (0: keep it until ``max_age_seconds``
        or its user's budget stops it). Silence is never taken for idleness, but a server
        whose report is disabled or patched out, or a GPU kernel no server reports (one its
        server never heard was started), must not hold GPUs for ever. Counted from the last
        report, or from when the hub found it running if it never reported; a server is
        silent only after three periods without a report, so keep this well above that.""",
    ).tag(config=True)

    keep_limit = Int(
        3,
        help="""How many times a student may press Keep for one server or kernel; then the
        panel says the GPU will go back and Keep is gone.""",
    ).tag(config=True)

    exempt_groups = List(
        Unicode(),
        help="Groups whose members' servers and GPU kernels are never culled for GPU idleness.",
    ).tag(config=True)

    period_seconds = Float(
        60.0,
        help="""Seconds between users' servers' activity reports, and between culling sweeps
        (a sweep also runs when a warning or stop falls due, so a stop lands within one of the
        server's 5 s samples, and its 1 s GPU reading, after its timeout).""",
    ).tag(config=True)

    server_profiles = Dict(
        help="""Per server profile (by its ``slug``), overrides of
        ``enabled``, ``timeout_seconds``, ``donor_timeout_seconds``, ``threshold``,
        ``warning_seconds``, ``max_age_seconds``, ``silent_seconds``, ``keep_limit`` and
        ``exempt_groups``, e.g.
        ``{"gpu-1": {"timeout_seconds": 7200}}``.""",
    ).tag(config=True)

    kernel_profiles = Dict(
        help="""Per GPU kernel profile (by the slug of ``GPUKernelSettings.profiles``), the
        same overrides as ``server_profiles``.""",
    ).tag(config=True)

    @validate("silent_seconds")
    def _not_negative(self, proposal: Any) -> float:
        if not proposal["value"] >= 0 or not math.isfinite(proposal["value"]):
            raise TraitError(f"GPUCullingSettings.silent_seconds must be 0 (off) or more, got {proposal['value']}")
        return proposal["value"]

    @validate("timeout_seconds", "period_seconds")
    def _positive(self, proposal: Any) -> float:
        if not proposal["value"] > 0 or not math.isfinite(proposal["value"]):
            raise TraitError(f"GPUCullingSettings.{proposal['trait'].name} must be positive, got {proposal['value']}")
        return proposal["value"]

    @validate("threshold")
    def _fraction(self, proposal: Any) -> float:
        if not 0 <= proposal["value"] < 1:
            raise TraitError(f"GPUCullingSettings.threshold is a fraction of 1 (0.05 is 5 %), got {proposal['value']}")
        return proposal["value"]

    @validate("server_profiles", "kernel_profiles")
    def _overrides(self, proposal: Any) -> dict:
        for slug, override in proposal["value"].items():
            _check_override(f"GPUCullingSettings.{proposal['trait'].name}[{slug!r}]", override)
        return proposal["value"]

    def default_policy(self) -> CullPolicy:
        return CullPolicy(
            enabled=self.enabled,
            timeout_s=self.timeout_seconds,
            donor_timeout_s=self.donor_timeout_seconds,
            threshold=self.threshold,
            warning_s=self.warning_seconds,
            max_age_s=self.max_age_seconds,
            silent_s=self.silent_seconds,
            keep_limit=self.keep_limit,
            exempt_groups=frozenset(self.exempt_groups),
        )

    def policy(self, kind: str, profile: str) -> CullPolicy:
        """The rule for a ``"server"`` or ``"kernel"`` of profile slug ``profile``."""
        overrides = (self.server_profiles if kind == "server" else self.kernel_profiles).get(profile) or {}
        policy = self.default_policy()
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key == "exempt_groups":
                changes["exempt_groups"] = frozenset(value)
            elif key == "enabled":
                changes["enabled"] = bool(value)
            elif key == "keep_limit":
                changes["keep_limit"] = int(value)
            else:
                changes[key.replace("_seconds", "_s")] = float(value)
        return replace(policy, **changes)


def _check_override(where: str, override: Any) -> None:
    if not isinstance(override, dict):
        raise TraitError(f"{where} must be a mapping of overrides")
    unknown = set(override) - set(OVERRIDES)
    if unknown:
        raise TraitError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use {', '.join(OVERRIDES)}")
    for key, value in override.items():
        if key == "exempt_groups":
            if isinstance(value, str) or not all(isinstance(g, str) for g in value):
                raise TraitError(f"{where}: exempt_groups must be a list of group names")
        elif key == "enabled":
            if not isinstance(value, bool):
                raise TraitError(f"{where}: enabled must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise TraitError(f"{where}: {key} must be a number of at least 0, got {value!r}")
        elif key == "threshold" and value >= 1:
            raise TraitError(f"{where}: threshold is a fraction of 1, got {value!r}")
        elif key == "timeout_seconds" and value == 0:
            raise TraitError(f"{where}: timeout_seconds must be positive (use enabled: false to turn culling off)")


def culling_settings_from_config(config: Config | None) -> GPUCullingSettings:
    return GPUCullingSettings(config=config or Config())
