"""What an install applies to a cluster, as this repository ships it (docs/install.md): the hub's
RBAC (z2jh's own hub Role, vendored with the tests, and what ``hub_config/`` adds to it), the
admin's other manifests, and the namespaces they name. The demo's hub and the kube tier's act
with this grant and nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim.kube import binaries

REPO = Path(__file__).resolve().parents[3]
Z2JH_HUB_ROLE = REPO / "tests" / "reference" / "z2jh" / "hub-role.yaml"
OUR_RBAC = (REPO / "hub_config" / "rbac.yaml", REPO / "hub_config" / "rbac-kernels.yaml")
HUB_RBAC = (Z2JH_HUB_ROLE, *OUR_RBAC)
# what install asks an admin to apply besides the hub's RBAC
ADMIN_MANIFESTS = (REPO / "hub_config" / "warm-pools.yaml",)
HUB_NAMESPACE = "jhub"  # the hub's own, apart from the users' (the manifests' "jhub-users")


def namespaces(users: str) -> dict[str, str]:
    """The manifests' namespaces -> these: the hub's as shipped, the users' ``users``."""
    return {"jhub": HUB_NAMESPACE, "jhub-users": users}


def unavailable() -> str | None:
    """Why a hub cannot be installed on the real control plane here (one line), or None: the
    control plane is not built, or the manifests are not here (a wheel carries none of them)."""
    if why := binaries.missing():
        return why
    if absent := [str(path) for path in (*HUB_RBAC, *ADMIN_MANIFESTS) if not path.is_file()]:
        return f"the hub's RBAC manifests are missing ({', '.join(absent)}); run from a source checkout"
    return None


def hub_kubeconfig(site: Any, workdir: Path, *, users: str) -> Path:
    """Install on ``site`` as docs/install.md asks an admin to, the users' namespace being
    ``users``, and write a kubeconfig acting as the hub's ServiceAccount (returned)."""
    from jupyter_gpuburst.sim.kube.hubaccount import apply_as_admin, grant_hub

    apply_as_admin(site, ADMIN_MANIFESTS, namespaces(users))
    return grant_hub(site, HUB_RBAC, workdir, namespaces(users), hub_namespace=HUB_NAMESPACE)
