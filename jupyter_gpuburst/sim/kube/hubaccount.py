"""The hub's identity on the real control plane: its ServiceAccount, bound by the deployment's
own RBAC manifests and nothing else, and a kubeconfig holding a token for it.

The manifests are applied as written, with the namespaces they name (``jhub`` for the hub's,
``jhub-users`` for the users', in ``hub_config/``) replaced by those given, as an admin's edit
would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube.credentials import service_account_kubeconfig

KINDS = {
    "ServiceAccount": "serviceaccounts",
    "Role": "roles.rbac.authorization.k8s.io",
    "RoleBinding": "rolebindings.rbac.authorization.k8s.io",
    "ClusterRole": "clusterroles.rbac.authorization.k8s.io",
    "ClusterRoleBinding": "clusterrolebindings.rbac.authorization.k8s.io",
}


# what an admin applies besides RBAC, as hub_config/ ships it (the warm pools' PriorityClass, a
# kernel network policy, a donor's kernel namespace and its offloading), with the type the API
# serves it under
ADMIN_KINDS = {
    "PriorityClass": "priorityclasses.scheduling.k8s.io",
    "NetworkPolicy": "networkpolicies.networking.k8s.io",
    "Namespace": "namespaces",
    liqo.NAMESPACE_OFFLOADING_KIND: f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}",
}


def apply_as_admin(site: Any, manifests: Iterable[Path], namespaces: Mapping[str, str]) -> None:
    """Create what ``manifests`` hold with the federation's admin credentials, as an admin's
    ``kubectl apply`` of the shipped files would (an existing object is left as it is)."""
    apply_documents_as_admin(site, documents(manifests), namespaces)


def apply_documents_as_admin(site: Any, docs: Iterable[dict[str, Any]], namespaces: Mapping[str, str]) -> None:
    """``apply_as_admin`` for documents already read (a shipped file edited as install says)."""
    for doc in docs:
        obj = retarget(doc, namespaces)
        rtype = ADMIN_KINDS.get(obj.get("kind", "")) or KINDS.get(obj.get("kind", ""))
        if rtype is None:
            raise ValueError(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: not a kind the admin's step applies")
        _create(site.store, rtype, obj)


def _create(store: Any, rtype: str, obj: dict[str, Any]) -> None:
    """Create ``obj``; one that exists is left as it is, as ``kubectl apply`` of an unchanged file does."""
    try:
        store.create(rtype, obj, obj["metadata"].get("namespace"))
    except ApiError as exc:
        if exc.code != 409:
            raise


def label_namespace(site: Any, name: str, labels: Mapping[str, str]) -> None:
    """Add ``labels`` to namespace ``name`` as an admin (``kubectl label``), making it if missing."""
    try:
        site.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as exc:
        if exc.code != 409:
            raise
    patch = json.dumps({"metadata": {"labels": dict(labels)}})
    response = site.store._sync.patch(
        f"{site.url}/api/v1/namespaces/{name}", content=patch, headers={"Content-Type": "application/merge-patch+json"}
    )
    if response.status_code != 200:
        raise ApiError(response.status_code, "Label", f"namespace {name}: {response.text[:200]}")


def documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all(Path(path).read_text()) if doc]


def retarget(doc: dict[str, Any], namespaces: Mapping[str, str]) -> dict[str, Any]:
    """``doc`` with each namespace named in ``namespaces`` replaced by its value (a Namespace's own name too)."""
    doc = copy.deepcopy(doc)
    meta = doc.setdefault("metadata", {})
    if meta.get("namespace") in namespaces:
        meta["namespace"] = namespaces[meta["namespace"]]
    if doc.get("kind") == "Namespace" and meta.get("name") in namespaces:
        meta["name"] = namespaces[meta["name"]]
    for subject in doc.get("subjects") or []:
        if subject.get("namespace") in namespaces:
            subject["namespace"] = namespaces[subject["namespace"]]
    return doc


def grant_hub(
    site: Any,
    manifests: Iterable[Path],
    workdir: Path,
    namespaces: Mapping[str, str],
    *,
    hub_namespace: str,
    service_account: str = "hub",
) -> Path:
    """Create the hub's ServiceAccount in ``hub_namespace``, apply ``manifests``' RBAC objects
    (their namespaces mapped by ``namespaces``), and write a kubeconfig acting as that
    ServiceAccount (returned)."""
    store = site.store
    for namespace in {hub_namespace, *namespaces.values()}:
        try:
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiError as exc:
            if exc.code != 409:
                raise
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account, "namespace": hub_namespace}}]
    objects += [retarget(doc, namespaces) for doc in documents(manifests)]
    for obj in objects:
        rtype = KINDS.get(obj.get("kind", ""))
        if rtype is None:
            raise ValueError(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: not an RBAC object the hub's grant may hold")
        _create(store, rtype, obj)
    return service_account_kubeconfig(Path(workdir) / f"{service_account}.kubeconfig", site, hub_namespace, service_account)
