"""What an admin configures about GPU kernels: their profiles, image, ports and lifetimes."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, validate
from traitlets.config import Config, Configurable

from jupyter_gpuburst.core.inventory import parse_count
from jupyter_gpuburst.hub.kernels.files import shared_storage
from jupyter_gpuburst.hub.kernels.resources import (
    RESOURCE_KEYS,
    GPUResources,
    kube_quantity,
    server_profile_resources,
    spawner_resources,
)
from jupyter_gpuburst.hub.profiles.options import profile_block

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
# A restarted kernel's pod listens on the other set of five ports than its previous pod did:
# jupyter_server tells a kernel that moved by its ports alone (MappingKernelManager.ports_changed),
# and would keep its websockets' and its activity watch's sockets on the old pod's address.
PORT_SETS = 2
SLUG = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class KernelProfile:
    """One GPU kernel a user may start: one kernelspec in their launcher."""

    slug: str
    display_name: str
    resource: str
    count: int
    allowed_sites: tuple[str, ...] | None = None
    image: str = ""
    # requests; a limit left empty equals its request, except for defaults (resources.py)
    cpu: str = ""
    memory: str = ""
    cpu_limit: str = ""
    memory_limit: str = ""

    def pod_image(self, default: str) -> str:
        """The image this profile's kernel pods run: its own, else ``default`` (the hub's kernel
        image, ``service.kernel_image``). Placement, started and pre-started pods all ask here."""
        return self.image or default

    def public(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "display_name": self.display_name,
            "resource": self.resource,
            "count": self.count,
        }


def gpu_label(resource: str, count: int) -> str:
    """'1 GPU', '2 GPUs', 'MIG 1g.10gb': the GPU part of a kernel's name in the launcher."""
    if resource.startswith("nvidia.com/mig-"):
        slice_ = resource.removeprefix("nvidia.com/mig-")
        return f"MIG {slice_}" if count == 1 else f"{count} × MIG {slice_}"
    if resource == "nvidia.com/gpu":
        return f"{count} GPU" + ("s" if count != 1 else "")
    return f"{count} × {resource}"


def parse_profile(raw: Any) -> KernelProfile:
    """A kernel profile from the admin's config; ValueError names what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"a kernel profile must be a mapping, not {type(raw).__name__}")
    unknown = set(raw) - {"slug", "display_name", "resource", "count", "allowed_sites", "image", *RESOURCE_KEYS}
    if unknown:
        raise ValueError(f"kernel profile {raw.get('slug')!r}: unknown key(s) {', '.join(sorted(unknown))}")
    resource = raw.get("resource", "nvidia.com/gpu")
    count = parse_count(raw.get("count", 1))
    if count < 1:
        raise ValueError(f"kernel profile {raw.get('slug')!r}: count must be at least 1")
    slug = str(raw.get("slug") or _slug(resource, count))
    if not SLUG.match(slug):
        raise ValueError(f"kernel profile slug {slug!r}: use lowercase letters, digits and '-' (at most 40)")
    sites = raw.get("allowed_sites")
    if sites is not None:
        if isinstance(sites, str) or not all(isinstance(s, str) and s for s in sites):
            raise ValueError(f"kernel profile {slug!r}: allowed_sites must be a list of site names")
        sites = tuple(sites)
    return KernelProfile(
        slug=slug,
        display_name=str(raw.get("display_name") or f"Python 3 ({gpu_label(resource, count)})"),
        resource=resource,
        count=count,
        allowed_sites=sites,
        image=str(raw.get("image") or ""),
        **{key: kube_quantity(raw.get(key), memory=key.startswith("memory")) for key in RESOURCE_KEYS},
    )


def _slug(resource: str, count: int) -> str:
    """A derived kernel profile's slug: ``<name>-<count>`` for NVIDIA's resources (``gpu-1``,
    ``mig-1g-10gb-1``), ``<vendor>-<name>-<count>`` for any other (``amd-gpu-1``,
    ``habana-gaudi-2``, the vendor being the domain without its last label), so that two
    vendors' GPUs never share one (docs/kernels.md, "Who may start them, and which kernels")."""
    domain, _, tail = resource.rpartition("/")
    vendor = domain.rsplit(".", 1)[0] if domain and domain != "nvidia.com" else ""
    name = f"{vendor}-{tail}-{count}" if vendor else f"{tail}-{count}"
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40]


def profiles_from_server_profiles(profile_list: Any, gpus: GPUResources | None = None) -> list[dict[str, Any]]:
    """One kernel profile per distinct GPU request among the spawner's (static) server profiles,
    with the CPU and memory of the first server profile that makes that request."""
    if not isinstance(profile_list, list | tuple):
        return []
    gpus = gpus or GPUResources()
    out: dict[tuple, dict[str, Any]] = {}
    for profile in profile_list:
        if not isinstance(profile, dict):
            continue
        try:
            block = profile_block(profile)
        except ValueError:
            continue
        if block is None:
            limits = ((profile.get("kubespawner_override") or {}).get("extra_resource_limits")) or {}
            gpu = [(r, v) for r, v in limits.items() if gpus.is_gpu(r)]
            if len(gpu) != 1:
                continue
            resource, count, sites = gpu[0][0], parse_count(gpu[0][1]), None
        else:
            resource, count, sites = block.resource, block.count, block.allowed_sites
        if count < 1:
            continue
        key = (resource, count, sites)
        if key not in out:
            entry: dict[str, Any] = {"resource": resource, "count": count}
            if sites is not None:
                entry["allowed_sites"] = list(sites)
                entry["slug"] = f"{_slug(resource, count)}-{'-'.join(sites)}"[:40].strip("-")
                entry["display_name"] = f"Python 3 ({gpu_label(resource, count)}, {', '.join(sites)})"
            entry.update(server_profile_resources(profile.get("kubespawner_override") or {}))
            out[key] = entry
    return list(out.values())


class GPUKernelSettings(Configurable):
    """Remote GPU kernels: the server stays on the origin, each GPU kernel runs where a GPU is free."""

    profiles = List(
        Dict(),
        help="""The GPU kernels users may start, one kernelspec each. Each entry: ``slug``,
        ``display_name`` (default "Python 3 (1 GPU)"-style), ``resource`` (default
        nvidia.com/gpu), ``count`` (default 1), ``allowed_sites``, and optionally ``image``,
        and ``cpu``, ``memory`` (the kernel pod's requests), ``cpu_limit``, ``memory_limit``
        (default: equal to the requests). Without them a kernel pod requests the spawner's
        ``cpu_guarantee``/``mem_guarantee`` and is limited by its ``cpu_limit``/``mem_limit``,
        else requests 1 CPU and 1Gi: never BestEffort, the first pods evicted. Default: one per
        distinct GPU request (any of the spawner's ``gpu_resource_names`` and
        ``gpu_resource_prefixes``) among the spawner's server profiles, with that profile's CPU
        and memory, when those profiles are a list; when a callable makes them, none, and the
        hub's log says so at start.""",
    ).tag(config=True)

    server_profiles = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        help="""Which server profiles offer GPU kernels, and which: server profile slug -> GPU
        kernel profile slugs (``["*"]``: all of them). A server whose profile is not listed offers
        none: no GPU kernels in its launcher, and its token cannot start one. Empty (the
        default): every server offers every GPU kernel. Example: ``{"cpu-gpu-kernels": ["*"]}``.""",
    ).tag(config=True)

    def offered_by(self, server_profile: str | None) -> frozenset[str] | None:
        """The GPU kernel profiles a server of ``server_profile`` offers; None: all of them."""
        if not self.server_profiles:
            return None
        slugs = self.server_profiles.get(server_profile or "", [])
        return None if "*" in slugs else frozenset(slugs)

    image = Unicode(
        "",
        help="""Image of kernel pods (it needs ipykernel and jupyter-gpuburst). Default: the
        spawner's ``image``.""",
    ).tag(config=True)

    base_port = Int(
        50000,
        help="""First of the ten ports kernel pods listen on: five (shell, iopub, stdin, control,
        heartbeat) from base_port, or from base_port + 5 for a restarted kernel whose previous pod
        had the first five (the user's server tells a moved kernel by its ports). Every kernel
        pod has its own IP, so all use the same ten.""",
    ).tag(config=True)

    start_timeout = Float(
        600.0,
        help="""Seconds a kernel pod may take to become ready before the start fails. Default
        600: the first kernel on a donor's node pulls the image first (servers get 60 s from
        KubeSpawner, 300 s from z2jh, 600 s in the example configurations). The user's server
        waits a little longer (``GPUBurstProvisioner.start_timeout``, default 630), so the hub's
        reason reaches the notebook; raise both together.""",
    ).tag(config=True)

    queue_when_full = Bool(
        False,
        help="""When no site has a GPU for a kernel: False (default) refuses the start at once
        with the reason; True accepts it and lets it wait for a GPU in the hub's one
        first-come-first-served queue, with the servers that wait to spawn
        (``GPUBurstSpawner.queue_when_full``), at most ``start_timeout``. While it waits, the
        kernel's record (the status bar, the GPU panel) says its place in line and the expected
        wait; shutting the kernel down leaves the queue.""",
    ).tag(config=True)

    max_kernels_per_user = Int(
        2,
        help="""GPU kernels one user may have at once, over all their servers, starting and
        waiting in the queue included (0: no limit). A start beyond it is refused with a
        sentence saying so. Each GPU kernel holds its GPU while it lives, so without a limit one
        student with many notebooks (or a script posting starts at once) holds every free GPU.
        The default, 2, is one notebook's kernel and one more; a restart needs no spare place
        (it stops the old kernel before it starts the new one).""",
    ).tag(config=True)

    @validate("max_kernels_per_user")
    def _not_negative(self, proposal: Any) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"GPUKernelSettings.max_kernels_per_user must be 0 (no limit) or more, got {proposal['value']}")
        return proposal["value"]

    termination_grace_seconds = Int(
        5,
        help="Grace period of kernel pods: a stopped kernel frees its GPU within this time.",
    ).tag(config=True)

    reap_interval_seconds = Float(
        60.0,
        help="""Seconds between sweeps that delete kernel pods whose server no longer runs
        (the server pod's garbage collection covers most cases; this covers the rest).""",
    ).tag(config=True)

    files_policy = AnyTrait(
        None,
        allow_none=True,
        help="""Decides whether a kernel pod may mount the user's files (see
        ``jupyter_gpuburst.hub.kernels.files``). A callable
        ``(KernelFilesRequest) -> KernelFiles | None`` (may be async); None gives scratch space.
        Default: with ``GPUBurstSpawner.storage_policy = "shared"``, kernels mount the server's
        volumes (``files.shared_storage``); otherwise scratch space for every kernel.""",
    ).tag(config=True)

    command = List(
        Unicode(),
        help="""Command of kernel pods. Default: ``python -m jupyter_gpuburst.kernel.pod``,
        which writes the connection file from the pod's Secret and runs ipykernel. Change it
        only for an image whose Python is elsewhere; the command must do the same.""",
    ).tag(config=True)

    extra_env = Dict(
        value_trait=Unicode(),
        help="""Extra environment variables for kernel pods. A kernel pod measures its own GPU
        for the panel with NVML (``JUPYTER_GPUBURST_BACKEND`` ``auto``); set it to ``simulated``
        where the GPUs are simulated, or ``none`` to report nothing.""",
    ).tag(config=True)

    modify_pod_hook = AnyTrait(
        None,
        allow_none=True,
        help="""A callable ``(pod, placement) -> pod`` (may be async) that may change a kernel
        pod before it is created, as ``KubeSpawner.modify_pod_hook`` does for servers. ``pod`` is
        the manifest as a plain dict; ``placement`` says where it goes (``site``,
        ``cluster_id``, ``node``, ``resource``, ``count``). It must keep the pod's name, labels,
        annotations, ports and its Secret reference.""",
    ).tag(config=True)

    uid = Int(
        None,
        allow_none=True,
        help="""The uid kernel pods run as (``runAsUser``). Default: the servers' own,
        ``KubeSpawner.uid``; unset there too, the image's user, as for servers. A kernel reads
        and writes the user's files as the server does. Never 0: kernel pods never run as root.""",
    ).tag(config=True)

    gid = Int(
        None,
        allow_none=True,
        help="The gid kernel pods run as (``runAsGroup``). Default: the servers' own, ``KubeSpawner.gid``.",
    ).tag(config=True)

    fs_gid = Int(
        None,
        allow_none=True,
        help="The kernel pods' ``fsGroup`` (owns their volumes). Default: the servers' own, ``KubeSpawner.fs_gid``.",
    ).tag(config=True)

    @validate("uid", "gid", "fs_gid")
    def _valid_id(self, proposal: Any) -> Any:
        value, name = proposal["value"], proposal["trait"].name
        if value is not None and (value < 0 or (name == "uid" and value == 0)):
            why = "kernel pods never run as root" if value == 0 else "it must be >= 0"
            raise TraitError(f"GPUKernelSettings.{name} = {value}: {why}")
        return value

    async def modified_pod(self, pod: dict[str, Any], placement: Any) -> dict[str, Any]:
        """``pod`` as ``modify_pod_hook`` leaves it (itself without a hook): every kernel pod,
        started for a request or pre-started for a pool, goes through it."""
        if self.modify_pod_hook is None:
            return pod
        pod = self.modify_pod_hook(pod, placement)
        if inspect.isawaitable(pod):
            pod = await pod
        if not isinstance(pod, dict):
            raise TypeError(f"GPUKernelSettings.modify_pod_hook must return the pod as a dict, not {type(pod).__name__}")
        return pod

    def ports(self, port_set: int = 0) -> dict[str, int]:
        """The five ports of a kernel pod: ``port_set`` 0 or 1 (see PORT_SETS)."""
        first = self.base_port + port_set * len(CHANNELS)
        return {f"{name}_port": first + i for i, name in enumerate(CHANNELS)}

    def kernel_profiles(self) -> dict[str, KernelProfile]:
        out: dict[str, KernelProfile] = {}
        for raw in self.profiles:
            profile = parse_profile(raw)
            if profile.slug in out:
                raise ValueError(
                    f"GPUKernelSettings.profiles: {_named(out[profile.slug])} and {_named(profile)} both have the slug "
                    f"{profile.slug!r}; give one a slug of its own"
                )
            out[profile.slug] = profile
        return out


def _named(profile: KernelProfile) -> str:
    return f"{profile.display_name!r} ({profile.count} × {profile.resource})"


def kernel_settings_from_config(config: Config | None) -> GPUKernelSettings:
    """The kernel settings of the hub's config; profiles default from the spawner's profiles."""
    config = config or Config()
    settings = GPUKernelSettings(config=config)
    if "profiles" not in (config.get("GPUKernelSettings") or {}):
        server_profiles = configured_profile_list(config)
        gpus = GPUResources(
            tuple(spawner_setting(config, "gpu_resource_names", GPUResources.names)),
            tuple(spawner_setting(config, "gpu_resource_prefixes", GPUResources.prefixes)),
        )
        settings.profiles = profiles_from_server_profiles(server_profiles, gpus)
    # a profile that sets no CPU or memory gets the spawner's hub-wide ones
    hub_wide = spawner_resources(lambda name: spawner_setting(config, name, None))
    settings.profiles = [{**hub_wide, **raw} if not set(raw) & set(RESOURCE_KEYS) else raw for raw in settings.profiles]
    for name in ("uid", "gid", "fs_gid"):
        if name not in (config.get("GPUKernelSettings") or {}):
            setattr(settings, name, server_id(config, name))
    if settings.files_policy is None and spawner_setting(config, "storage_policy", None) == "shared":
        settings.files_policy = shared_storage
    return settings


def configured_profile_list(config: Config | None) -> Any:
    """The spawner's ``profile_list`` as configured (GPUBurstSpawner over KubeSpawner), or None."""
    config = config or Config()
    for section in ("GPUBurstSpawner", "KubeSpawner"):
        if "profile_list" in (config.get(section) or {}):
            return config[section]["profile_list"]
    return None


def profile_notes(config: Config | None) -> list[str]:
    """Why no GPU kernel profile was derived, for the hub's log at start (empty: nothing to say)."""
    config = config or Config()
    if "profiles" in (config.get("GPUKernelSettings") or {}):
        return []
    server_profiles = configured_profile_list(config)
    if kernel_settings_from_config(config).profiles:
        return []
    if callable(server_profiles):
        why = "the spawner's profile_list is a callable, which only a user's spawn can call"
    elif not server_profiles:
        why = "the spawner has no profile_list"
    else:
        names = sorted(set(spawner_setting(config, "gpu_resource_names", GPUResources.names)))
        prefixes = sorted(set(spawner_setting(config, "gpu_resource_prefixes", GPUResources.prefixes)))
        why = (
            "no server profile requests exactly one GPU resource (extra_resource_limits with one of "
            f"{', '.join(names + [p + '*' for p in prefixes])})"
        )
    return [
        f"No GPU kernels are offered: {why}. List them in c.GPUKernelSettings.profiles "
        '(for example [{"resource": "nvidia.com/gpu", "count": 1, "cpu": "2", "memory": "8Gi"}]).'
    ]


def server_id(config: Config, name: str) -> int | None:
    """The spawner's ``uid``, ``gid`` or ``fs_gid``, which kernel pods share with servers; a
    callable (decided per server) cannot be: the admin sets GPUKernelSettings' own."""
    value = spawner_setting(config, name, None)
    if callable(value):
        raise ValueError(
            f"KubeSpawner.{name} is a callable, decided per server; GPU kernel pods need one value: set GPUKernelSettings.{name}"
        )
    return value


def spawner_setting(config: Config | None, name: str, default: Any) -> Any:
    """A spawner trait as configured for the hub (GPUBurstSpawner over KubeSpawner)."""
    config = config or Config()
    for section in ("GPUBurstSpawner", "KubeSpawner", "Spawner"):
        if name in (config.get(section) or {}):
            return config[section][name]
    return default
