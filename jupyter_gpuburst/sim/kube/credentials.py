"""Credentials on the real control plane: the federation's admin kubeconfig, and a hub's.

The hub never holds admin credentials there: ``service_account_kubeconfig`` asks the API server
for a token of the hub's ServiceAccount (the TokenRequest API, as a projected service-account
token is made for a pod), so the hub is bound by exactly the RBAC the deployment grants it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from jupyter_gpuburst.sim.errors import ApiError

TOKEN_SECONDS = 24 * 3600  # longer than any test run or demo; the API server may shorten it


def _write(path: str | os.PathLike[str], doc: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return path


def write_admin_kubeconfig(path: str | os.PathLike[str], sites: Mapping[str, Any], current: str, namespace: str = "default") -> Path:
    """A context per site (named after it), each with its CA and the harness's client certificate."""
    clusters, users, contexts = [], [], []
    for name, site in sites.items():
        ca, cert, key = site.credentials()
        clusters.append({"name": name, "cluster": {"server": site.url, "certificate-authority": ca}})
        users.append({"name": name, "user": {"client-certificate": cert, "client-key": key}})
        contexts.append({"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": current,
    }
    return _write(path, doc)


def request_token(store: Any, namespace: str, service_account: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bound token for ``namespace/service_account`` (serviceaccounts/token, TokenRequest)."""
    rt_path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    response = store._sync.post(f"{store.url}{rt_path}", json=body)
    if response.status_code != 201:
        raise ApiError(response.status_code, "TokenRequest", f"no token for {namespace}/{service_account}: {response.text[:200]}")
    return response.json()["status"]["token"]


def service_account_kubeconfig(path: str | os.PathLike[str], site: Any, namespace: str, service_account: str) -> Path:
    """A kubeconfig that acts as ``namespace/service_account`` on ``site``, and nothing more."""
    ca, _, _ = site.credentials()
    token = request_token(site.store, namespace, service_account)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": site.name, "cluster": {"server": site.url, "certificate-authority": ca}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": site.name, "context": {"cluster": site.name, "user": service_account, "namespace": namespace}}],
        "current-context": site.name,
    }
    return _write(path, doc)
