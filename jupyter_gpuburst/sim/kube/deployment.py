"""What an install applies to a cluster, as this repository ships it (docs/install.md): the hub's
RBAC (z2jh's own hub Role, vendored with the tests, and what ``hub_config/`` adds to it), the
admin's other manifests, and the namespaces they name. The demo's hub and the kube tier's act
with this grant and nothing more."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from jupyter_gpuburst.sim.kube import binaries

REPO = Path(__file__).resolve().parents[3]
Z2JH_HUB_ROLE = REPO / "tests" / "reference" / "z2jh" / "hub-role.yaml"
OUR_RBAC = (REPO / "hub_config" / "rbac.yaml", REPO / "hub_config" / "rbac-kernels.yaml")
HUB_RBAC = (Z2JH_HUB_ROLE, *OUR_RBAC)
# what install asks an admin to apply besides the hub's RBAC
ADMIN_MANIFESTS = (REPO / "hub_config" / "warm-pools.yaml",)
# kernel mode, once per donor (docs/install.md): the donor's kernel namespace, offloaded to it
# alone, and the hub's Role there; shipped for the donor named below, which install's `sed` replaces
DONOR_KERNELS = REPO / "hub_config" / "donor-kernels.yaml"
DONOR_KERNELS_SHIPPED_FOR = "polito-hpc"
HUB_NAMESPACE = "jhub"  # the hub's own, apart from the users' (the manifests' "jhub-users")
HUB_USER = f"system:serviceaccount:{HUB_NAMESPACE}:hub"  # the hub's identity in audit logs


def namespaces(users: str, donors: Iterable[str] = ()) -> dict[str, str]:
    """The manifests' namespaces -> these: the hub's as shipped, the users' ``users``, and each
    donor's kernel namespace (``<users>-kernels-<cluster id>``, as the hub names it)."""
    kernels = {f"jhub-users-kernels-{donor}": f"{users}-kernels-{donor}" for donor in donors}
    return {"jhub": HUB_NAMESPACE, "jhub-users": users, **kernels}


def donor_kernel_documents(donors: Iterable[str]) -> list[dict[str, Any]]:
    """``hub_config/donor-kernels.yaml`` once per donor, its cluster id in place of the shipped
    one, as install's ``sed ... | kubectl apply -f -`` makes them (namespaces as shipped)."""
    text = DONOR_KERNELS.read_text()
    return [doc for donor in donors for doc in yaml.safe_load_all(text.replace(DONOR_KERNELS_SHIPPED_FOR, donor)) if doc]


def unavailable() -> str | None:
    """Why a hub cannot be installed on the real control plane here (one line), or None: the
    control plane is not built, or the manifests are not here (a wheel carries none of them)."""
    if why := binaries.missing():
        return why
    if absent := [str(path) for path in (*HUB_RBAC, *ADMIN_MANIFESTS, DONOR_KERNELS) if not path.is_file()]:
        return f"the hub's RBAC manifests are missing ({', '.join(absent)}); run from a source checkout"
    return None


def hub_kubeconfig(site: Any, workdir: Path, *, users: str, donors: Iterable[str] = ()) -> Path:
    """Install on ``site`` as docs/install.md asks an admin to, the users' namespace being
    ``users`` (and, for kernel mode, ``donor-kernels.yaml`` once per donor in ``donors``), and
    write a kubeconfig acting as the hub's ServiceAccount (returned)."""
    from jupyter_gpuburst.sim.kube.hubaccount import apply_as_admin, apply_documents_as_admin, grant_hub

    donors = list(donors)
    mapping = namespaces(users, donors)
    apply_as_admin(site, ADMIN_MANIFESTS, mapping)
    apply_documents_as_admin(site, donor_kernel_documents(donors), mapping)
    return grant_hub(site, HUB_RBAC, workdir, mapping, hub_namespace=HUB_NAMESPACE)
