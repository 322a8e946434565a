"""Storage as an input to placement: where a user's volumes live, and what the policy makes of it.

A student's files are where their home volume is bound. Liqo reflects to a donor only the
claims of its own virtual storage class (``liqo``); any other claim bound on the origin cannot
follow a pod to a donor (the donor has no such claim, and the pod stays Pending there). The admin
chooses what happens with ``storage_policy``:

- ``shared``: the volumes are reachable from every site (e.g. NFS over Liqo's network, or a
  claim of the same name provisioned on every donor): mounted as they are, no constraint.
- ``pin-to-volume``: a server goes where its volumes are bound (data gravity). A ``liqo``-class
  claim not bound yet binds where its first pod lands, so it constrains nothing until then.
- ``scratch-on-donor``: placement ignores the volumes; on a site they cannot reach, they are
  replaced by empty scratch space, and the student is told so on the spawn page and in the panel.

Everything here but :func:`read_claims` is pure, so the hub's spawner, the kernel-placement API
and the tests share one set of rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.core.keys import ORIGIN_SITE, STORAGE_ENV, STORAGE_MESSAGE_ENV

# Set by kube-scheduler on a claim whose binding waits for its first consumer: the node chosen
# for that pod, hence where the volume is provisioned (for Liqo's class: the virtual node).
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"


class StoragePolicy(str, Enum):
    SHARED = "shared"
    PIN_TO_VOLUME = "pin-to-volume"
    SCRATCH_ON_DONOR = "scratch-on-donor"


POLICY_HELP = """What placement does with the user's persistent volumes (the home directory's
claim, and any other PersistentVolumeClaim the server mounts). Liqo carries only claims of its
'liqo' storage class to a donor; a claim of any other class bound on the origin cannot follow a
server there.
'pin-to-volume' (default): a server runs on the site where its volumes are bound, and the spawn
page says so ('your home volume is on the origin; storage policy pins servers to it'); a
'liqo'-class claim not bound yet binds where its first server lands.
'shared': the volumes are reachable from every site (NFS over Liqo's network, or a claim of the
same name provisioned on every donor): mounted as they are, no constraint.
'scratch-on-donor': servers go wherever GPUs are free; on a site their volumes cannot reach, the
volumes are replaced by empty scratch space (emptyDir), and the student is told, on the spawn
page and in the Lab panel, that files saved there are lost when the server stops.
Can be set per profile with kubespawner_override."""


class StorageKind(str, Enum):
    """What the server got, as the panel shows it."""

    NONE = "none"  # no persistent volume configured
    HOME = "home"  # its volumes, mounted where they are bound
    SHARED = "shared"  # its volumes, on storage every site reaches
    SCRATCH = "scratch"  # empty scratch space instead of its volumes


@dataclass(frozen=True)
class Claim:
    """What placement needs to know about one PersistentVolumeClaim a server mounts."""

    name: str
    storage_class: str | None = None
    # None: the claim does not exist yet (KubeSpawner creates it on the origin at start)
    phase: str | None = None
    selected_node: str | None = None

    @property
    def follows_pod(self) -> bool:
        """A Liqo virtual-storage claim: provisioned on the site where its first pod lands."""
        return self.storage_class == liqo.VIRTUAL_STORAGE_CLASS

    @classmethod
    def from_object(cls, pvc: Mapping[str, Any]) -> Claim:
        meta = pvc.get("metadata") or {}
        return cls(
            name=meta.get("name", ""),
            storage_class=(pvc.get("spec") or {}).get("storageClassName"),
            phase=(pvc.get("status") or {}).get("phase") or "Pending",
            selected_node=(meta.get("annotations") or {}).get(SELECTED_NODE_ANNOTATION),
        )


SiteOfNode = Callable[[str], "str | None"]


def claim_site(claim: Claim, site_of_node: SiteOfNode) -> str | None:
    """The site holding the claim's data, or None while it can still bind anywhere."""
    if claim.follows_pod:
        if claim.selected_node:
            return site_of_node(claim.selected_node) or ORIGIN_SITE
        return None
    # Any other class is provisioned by the origin's own storage: its data stays there.
    return ORIGIN_SITE


def claim_names(volumes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the claims a pod's ``volumes`` mount (KubeSpawner's ``volumes``, expanded)."""
    out = []
    for volume in volumes or []:
        claim = (volume or {}).get("persistentVolumeClaim") or {}
        name = claim.get("claimName")
        if name and name not in out:
            out.append(name)
    return out


def _where(site: str) -> str:
    return "the origin" if site == ORIGIN_SITE else site  # donors by their own name, as names.site_name


@dataclass(frozen=True)
class Constraint:
    """The sites placement may use because of storage (None: any), and why."""

    allowed_sites: tuple[str, ...] | None = None
    reason: str = ""


def constrain(policy: StoragePolicy | str, claims: Sequence[Claim], site_of_node: SiteOfNode) -> Constraint:
    """The placement constraint ``policy`` puts on a server that mounts ``claims``."""
    policy = StoragePolicy(policy)
    if policy is not StoragePolicy.PIN_TO_VOLUME or not claims:
        return Constraint()
    sites = sorted({s for s in (claim_site(c, site_of_node) for c in claims) if s is not None})
    if not sites:
        return Constraint()
    what = "home volume is" if len(claims) == 1 else "volumes are"
    if len(sites) > 1:
        return Constraint((), f"your {what} bound on different sites ({', '.join(map(_where, sites))}), so no site can mount them all")
    return Constraint((sites[0],), f"your {what} on {_where(sites[0])}; storage policy pins servers to it")


def combine(allowed: tuple[str, ...] | None, constraint: Constraint) -> tuple[str, ...] | None:
    """A request's own allowed sites narrowed by the storage constraint."""
    if constraint.allowed_sites is None:
        return allowed
    if allowed is None:
        return constraint.allowed_sites
    return tuple(s for s in allowed if s in constraint.allowed_sites)


def can_mount(policy: StoragePolicy | str, claims: Sequence[Claim], site: str, site_of_node: SiteOfNode) -> bool:
    """Whether a pod on ``site`` can mount ``claims`` (for servers and kernel pods alike).

    ``shared`` says every site reaches them; otherwise each claim must be bound on ``site`` or
    still free to bind there.
    """
    if StoragePolicy(policy) is StoragePolicy.SHARED:
        return True
    return all(claim_site(c, site_of_node) in (None, site) for c in claims)


@dataclass(frozen=True)
class Outcome:
    """What a server placed on ``site`` gets for storage, and what the student is told."""

    kind: StorageKind
    message: str = ""
    scratch_claims: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}

    def env(self) -> dict[str, str]:
        return {STORAGE_ENV: self.kind.value, STORAGE_MESSAGE_ENV: self.message}


def outcome(policy: StoragePolicy | str, claims: Sequence[Claim], site: str, site_of_node: SiteOfNode) -> Outcome:
    """The storage a server placed on ``site`` gets under ``policy``."""
    policy = StoragePolicy(policy)
    if not claims:
        return Outcome(StorageKind.NONE, "This server has no persistent storage: files are lost when it stops.")
    if policy is StoragePolicy.SHARED:
        return Outcome(StorageKind.SHARED, "Your home directory is on shared storage, reachable from every site.")
    lost = tuple(c.name for c in claims if claim_site(c, site_of_node) not in (None, site))
    if not lost:
        return Outcome(StorageKind.HOME, f"Your home directory is mounted; it is stored on {_where(site)}.")
    if policy is StoragePolicy.SCRATCH_ON_DONOR:
        homes = sorted({claim_site(c, site_of_node) or ORIGIN_SITE for c in claims if c.name in lost})
        return Outcome(
            StorageKind.SCRATCH,
            f"This server runs on {_where(site)}, but your home directory stays on "
            f"{', '.join(map(_where, homes))}: it is not mounted here. You get empty scratch space "
            "instead, and files saved in it are lost when the server stops; download what you need.",
            lost,
        )
    # pin-to-volume placed it elsewhere: only when the constraint was bypassed; refuse loudly
    raise ValueError(f"storage policy {policy.value!r} cannot place a server on {site} away from its volumes")


def scratch_volumes(
    volumes: Iterable[Any], scratch_claims: Sequence[str], to_dict: Callable[[Any], Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A pod's volumes with each claim in ``scratch_claims`` replaced by an emptyDir of the same
    name, so every volumeMount still resolves."""
    out = []
    for volume in volumes or []:
        raw = dict(to_dict(volume))
        claim = (raw.get("persistentVolumeClaim") or {}).get("claimName")
        if claim in scratch_claims:
            raw = {"name": raw["name"], "emptyDir": {}}
        out.append(raw)
    return out


async def read_claims(core_api: Any, namespace: str, names: Sequence[str], default_class: str | None = None) -> list[Claim]:
    """One GET per claim the server mounts (usually one: the home volume).

    Read at spawn, not from a watch: KubeSpawner creates the claim moments before the pod
    manifest is built, and a GET is consistent with that write while a watch-fed cache may not
    have seen it yet. A claim that does not exist yet will be created by KubeSpawner with
    ``default_class`` (its ``storage_class``; None is the cluster default).
    """
    from kubernetes_asyncio.client.exceptions import ApiException

    claims = []
    for name in names:
        try:
            pvc = await core_api.read_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            claims.append(Claim(name=name, storage_class=default_class))
            continue
        claims.append(Claim.from_object(core_api.api_client.sanitize_for_serialization(pvc)))
    return claims
