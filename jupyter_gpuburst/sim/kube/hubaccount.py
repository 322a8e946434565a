"""The hub's identity on the real control plane: its ServiceAccount, bound by the deployment's
own RBAC manifests and nothing else, and a kubeconfig holding a token for it.

The manifests are applied as written, with the namespace they name (``jhub`` in
``hub_config/``) replaced by the one the hub runs in, as ``kubectl apply -n`` and an edit would.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube.credentials import service_account_kubeconfig

KINDS = {
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
}


def documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all(Path(path).read_text()) if doc]


def retarget(doc: dict[str, Any], manifest_namespace: str, namespace: str) -> dict[str, Any]:
    """``doc`` with ``manifest_namespace`` replaced by ``namespace`` where a namespace is named."""
    doc = copy.deepcopy(doc)
    meta = doc.setdefault("metadata", {})
    if meta.get("namespace") == manifest_namespace:
        meta["namespace"] = namespace
    for subject in doc.get("subjects") or []:
        if subject.get("namespace") == manifest_namespace:
            subject["namespace"] = namespace
    return doc


def grant_hub(
    site: Any, namespace: str, manifests: Iterable[Path], workdir: Path, *, service_account: str = "hub", manifest_namespace: str = "jhub"
) -> Path:
    """Create the hub's ServiceAccount in ``namespace``, apply ``manifests``' RBAC objects, and
    write a kubeconfig acting as that ServiceAccount (returned)."""
    store = site.store
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account, "namespace": namespace}}]
    objects += [retarget(doc, manifest_namespace, namespace) for doc in documents(manifests)]
    for obj in objects:
        rtype = KINDS.get(obj.get("kind", ""))
        if rtype is None:
            raise ValueError(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: not an RBAC object the hub's grant may hold")
        try:
            store.create(rtype, obj, obj["metadata"].get("namespace"))
        except ApiError as exc:
            if exc.code != 409:
                raise
    return service_account_kubeconfig(Path(workdir) / f"{service_account}.kubeconfig", site, namespace, service_account)
