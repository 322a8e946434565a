"""Write a kubeconfig for emulated clusters (plain http, no credentials, one context each)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

import yaml


def kubeconfig_dict(contexts: Mapping[str, str], current: str, namespace: str = "default") -> dict:
    """The kubeconfig document for ``{context_name: server_url}``."""
    if not contexts:
        raise ValueError("kubeconfig needs at least one context")
    if current not in contexts:
        raise ValueError(f"current context {current!r} is not one of {sorted(contexts)}")
    for name, url in contexts.items():
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"context {name!r}: server URL {url!r} is not an http(s) URL")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": url}} for name, url in contexts.items()],
        # An empty user: the emulator does no authentication, and kubectl and the Python
        # clients accept `user: {}` over plain http.
        "users": [{"name": name, "user": {}} for name in contexts],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}} for name in contexts],
        "current-context": current,
    }


def write_kubeconfig(path: str | os.PathLike[str], contexts: Mapping[str, str], current: str, namespace: str = "default") -> Path:
    """Write the kubeconfig (mode 0600, like kubectl does) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(contexts, current, namespace), sort_keys=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path
