"""Where this server runs, from the env the spawner sets (the server never asks Kubernetes)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping

from jupyter_gpuburst.core import names
from jupyter_gpuburst.core.keys import (
    CLUSTER_ENV,
    GPU_COUNT_ENV,
    GPU_RESOURCE_ENV,
    NODE_ENV,
    ORIGIN_SITE,
    REASON_ENV,
    SITE_ENV,
    STORAGE_ENV,
    STORAGE_MESSAGE_ENV,
)

log = logging.getLogger(__name__)

STORAGE_KINDS = ("none", "home", "shared", "scratch")


def storage_from_env(environ: Mapping[str, str]) -> dict | None:
    """``{kind, message}``: 'scratch' means files saved on this server are lost when it stops."""
    kind = _text(environ, STORAGE_ENV)
    if kind is None:
        return None
    if kind not in STORAGE_KINDS:
        log.warning("%s=%r is not one of %s; storage not shown", STORAGE_ENV, kind, ", ".join(STORAGE_KINDS))
        return None
    return {"kind": kind, "message": _text(environ, STORAGE_MESSAGE_ENV) or ""}


def _text(environ: Mapping[str, str], key: str) -> str | None:
    value = environ.get(key, "").strip()
    return value or None


def _count(environ: Mapping[str, str]) -> int | None:
    raw = _text(environ, GPU_COUNT_ENV)
    if raw is None:
        return None
    try:
        count = int(raw)
    except ValueError:
        log.warning("%s=%r is not a whole number; GPU count not shown", GPU_COUNT_ENV, raw)
        return None
    return count if count >= 0 else None


def placement_from_env(environ: Mapping[str, str]) -> dict:
    """The placement JSON of `GET /api/gpuburst/placement` (see docs/api.md)."""
    site = _text(environ, SITE_ENV)
    resource, count = _text(environ, GPU_RESOURCE_ENV), _count(environ)
    common = {
        "gpu_resource": resource,
        "gpu_count": count,
        # the product's one name for what was requested ("2 GPUs", "1 MIG 1g.10gb slice")
        "gpu_label": names.gpu_amount(resource, count) if resource and count else None,
        "storage": storage_from_env(environ),
    }
    if site is None:
        return {
            "managed": False,
            "site": "standalone",
            "site_kind": "standalone",
            "cluster": None,
            "node": _text(environ, NODE_ENV) or socket.gethostname(),
            "reason": None,
            **common,
        }
    return {
        "managed": True,
        "site": site,
        "site_kind": "origin" if site == ORIGIN_SITE else "donor",
        "cluster": _text(environ, CLUSTER_ENV),
        "node": _text(environ, NODE_ENV),
        "reason": _text(environ, REASON_ENV),
        **common,
    }
