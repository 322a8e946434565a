"""Every configurable knob of GPU placement, as traitlets, and their translation into a Policy.

``GPUBurstSpawner`` inherits these traits, so an admin writes ``c.GPUBurstSpawner.strategy``.
The per-process ``CapacityTracker`` reads the same section from the hub's config, so one set of
settings drives both the spawner and the shared state.
"""

from __future__ import annotations

import functools
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, Union, validate
from traitlets.config import Config, Configurable

from jupyter_gpuburst.core.inventory import DEFAULT_RESOURCE_NAMES, DEFAULT_RESOURCE_PREFIXES
from jupyter_gpuburst.core.placement import PlacementInputError, Policy, Strategy
from jupyter_gpuburst.hub.sites.storage import POLICY_HELP, StoragePolicy

SPAWNER_SECTION = "GPUBurstSpawner"


class GPUBurstSettings(Configurable):
    """Placement settings shared by the spawner and the per-hub capacity tracker."""

    strategy = Unicode(
        Strategy.LOCAL_FIRST.value,
        config=True,
        help="""Where GPU servers go: 'local-first' (the origin, then donors), 'donor-first',
        'local-only' or 'donor-only'.""",
    )
    donor_order = List(
        Unicode(),
        config=True,
        help="Donor cluster ids tried in this order before any donor not listed.",
    )
    donor_allowlist = Union(
        [List(Unicode()), Unicode()],
        default_value=None,
        allow_none=True,
        config=True,
        help="Donor cluster ids that may be used at all; None (default) allows every peered donor.",
    )
    profile_donors = Dict(
        value_trait=List(Unicode()),
        config=True,
        help="Profile slug -> donor cluster ids that profile may use (overrides donor_allowlist).",
    )
    user_donor_cap = Int(
        None,
        allow_none=True,
        config=True,
        help="Most donor GPUs one user may hold at once; None means no cap.",
    )
    group_donor_caps = Dict(
        value_trait=Int(),
        config=True,
        help="Group name -> most donor GPUs all of its members may hold together.",
    )
    donor_latency_penalty = Float(
        1.0,
        config=True,
        help="Weight 'a' of the latency term of the placement loss for any donor (origin is 0).",
    )
    donor_latency = Dict(
        value_trait=Float(),
        config=True,
        help="Donor cluster id -> its own latency penalty, overriding donor_latency_penalty.",
    )
    idle_memory_weight = Float(
        1.0,
        config=True,
        help="Weight 'b' of the idle GPU memory (GiB left stranded on the chosen node) in the loss.",
    )
    resource_memory_gib = Dict(
        value_trait=Float(),
        config=True,
        help="""GPU resource name -> GiB of GPU memory per unit, for the idle-memory term
        (default 1), and for right-sizing's comparison of whole GPUs with MIG slices (default:
        what sessions on it measured; a MIG slice's name says its own).""",
    )
    max_gpus_per_server = Int(
        8,
        config=True,
        help="Most GPU units one server may request; larger profiles are refused with a clear error.",
    )
    pin_local_node = Bool(
        True,
        config=True,
        help="""Pin local GPU pods to the node placement chose (best fit), instead of letting
        kube-scheduler spread them and strand GPUs.""",
    )
    reservation_ttl_seconds = Float(
        300.0,
        config=True,
        help="How long a decision holds its GPUs before its pod is bound; guards against leaks.",
    )
    gpu_resource_names = List(
        Unicode(),
        default_value=list(DEFAULT_RESOURCE_NAMES),
        config=True,
        help="Extended resource names counted as GPUs (exact names).",
    )
    gpu_resource_prefixes = List(
        Unicode(),
        default_value=list(DEFAULT_RESOURCE_PREFIXES),
        config=True,
        help="Extended resource name prefixes counted as GPUs (for MIG slices such as nvidia.com/mig-).",
    )
    donor_pending_grace_seconds = Float(
        30.0,
        config=True,
        help="""How long a pod may stay Pending on a donor, unscheduled there, before it is re-placed
        elsewhere. A pod the donor's node is starting (pulling its image) is left to start.""",
    )
    max_redirects = Int(
        2,
        config=True,
        help="How many times one spawn may be re-placed after its pod turned unschedulable.",
    )
    queue_when_full = Bool(
        False,
        config=True,
        help="""When no site has room: False (default) fails the spawn at once with the reason;
        True waits in a first-come-first-served queue, bounded by start_timeout.""",
    )
    offload_namespace = Bool(
        True,
        config=True,
        help="""Create the namespace's Liqo NamespaceOffloading before the first donor spawn.
        Turn off when the cluster admin manages offloading.""",
    )

    storage_policy = Enum(
        [p.value for p in StoragePolicy],
        default_value=StoragePolicy.PIN_TO_VOLUME.value,
        config=True,
        help=POLICY_HELP,
    )

    @validate("strategy")
    def _valid_strategy(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"]
        try:
            return Strategy(value).value
        except ValueError:
            raise PlacementInputError(f"unknown strategy {value!r}; expected one of {', '.join(s.value for s in Strategy)}") from None

    @validate("max_redirects", "max_gpus_per_server")
    def _non_negative(self, proposal: dict[str, Any]) -> int:
        if proposal["value"] < 0:
            raise PlacementInputError(f"{proposal['trait'].name} must not be negative, not {proposal['value']}")
        return proposal["value"]

    def policy(self, known_profiles: frozenset[str] | None = None) -> Policy:
        """The placement Policy these settings describe."""
        allow = self.donor_allowlist
        if isinstance(allow, str):
            allow = [allow]
        return Policy(
            strategy=Strategy(self.strategy),
            donor_order=tuple(self.donor_order),
            donor_allowlist=None if allow is None else frozenset(allow),
            profile_donors={k: tuple(v) for k, v in self.profile_donors.items()},
            user_donor_cap=self.user_donor_cap,
            group_donor_caps=dict(self.group_donor_caps),
            donor_latency_penalty=self.donor_latency_penalty,
            donor_latency=dict(self.donor_latency),
            idle_memory_weight=self.idle_memory_weight,
            resource_memory_gib=dict(self.resource_memory_gib),
            resource_names=frozenset(self.gpu_resource_names),
            resource_prefixes=tuple(self.gpu_resource_prefixes),
            max_count=max(1, self.max_gpus_per_server),
            known_profiles=known_profiles,
            pin_node=self.pin_local_node,
        )


def spawner_sections(config: Config) -> list[str]:
    """Config sections of the hub's spawner class and its parents, base first, as traitlets
    reads them: ``c.MySpawner.strategy`` applies to a subclass ``MySpawner`` of GPUBurstSpawner."""
    spawner_class: Any = config.JupyterHub.get("spawner_class") if "JupyterHub" in config else None
    if isinstance(spawner_class, str):
        spawner_class = _load_spawner_class(spawner_class)
    if not isinstance(spawner_class, type) or not issubclass(spawner_class, GPUBurstSettings):
        return [SPAWNER_SECTION]
    return [c.__name__ for c in reversed(spawner_class.mro()) if issubclass(c, GPUBurstSettings) and c is not GPUBurstSettings]


@functools.lru_cache(maxsize=64)
def _load_spawner_class(name: str) -> type | None:
    """JupyterHub's spawner_class string: an entry point name or a dotted import path.

    Looked up once per name: reading every installed distribution's entry points takes some
    10 ms, and every spawn asks (for its tracker's API settings) on the hub's event loop.
    """
    from importlib import import_module
    from importlib.metadata import entry_points

    for ep in entry_points(group="jupyterhub.spawners"):
        if ep.name == name:
            name = ep.value.replace(":", ".")
    module, _, attr = name.rpartition(".")
    if not module:
        return None
    try:
        return getattr(import_module(module), attr, None)
    except ImportError:
        return None


def settings_from_config(config: Config | None) -> GPUBurstSettings:
    """Settings from a hub's config: ``GPUBurstSettings``, ``GPUBurstSpawner``, and the section of
    the configured spawner class when it subclasses GPUBurstSpawner (later sections win)."""
    config = config or Config()
    merged = Config()
    names = set(GPUBurstSettings.class_trait_names(config=True))
    sections = ["GPUBurstSettings"] + [s for s in spawner_sections(config) if s != "GPUBurstSettings"]
    if SPAWNER_SECTION not in sections:
        sections.insert(1, SPAWNER_SECTION)
    for section in sections:
        if section in config:
            for key, value in config[section].items():
                if key in names:
                    merged.GPUBurstSettings[key] = value
    return GPUBurstSettings(config=merged)


def api_settings_from_config(config: Config | None) -> dict[str, Any]:
    """KubeSpawner's API-server settings (host, CA, TLS check) as a spawner would see them."""
    config = config or Config()
    out: dict[str, Any] = {"host": None, "ssl_ca_cert": None, "verify_ssl": None}
    for section in ["KubeSpawner", *spawner_sections(config)]:
        if section in config:
            for key, name in (("k8s_api_host", "host"), ("k8s_api_ssl_ca_cert", "ssl_ca_cert"), ("k8s_api_verify_ssl", "verify_ssl")):
                if key in config[section]:
                    out[name] = config[section][key]
    return out
