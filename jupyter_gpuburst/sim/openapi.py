"""Minimal OpenAPI documents: what kubectl reads before ``create -f``.

kubectl 1.29+ fetches ``/openapi/v3`` and the group-version document, and looks, per kind, for
a ``patch`` operation carrying ``x-kubernetes-group-version-kind`` and a ``fieldValidation``
query parameter to learn that the server validates fields itself. Older kubectl reads
``/openapi/v2`` as protobuf, where an empty document passes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from jupyter_gpuburst.sim.resources import RESOURCES, ResourceType


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _item_path(rt: ResourceType) -> str:
    prefix = "/" + _gv_path(rt.group, rt.version)
    if rt.namespaced:
        return f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
    return f"{prefix}/{rt.plural}/{{name}}"


def group_version_document(group: str, version: str, git_version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version, or None when it is not served."""
    types = [rt for rt in RESOURCES.values() if rt.group == group and rt.version == version and "patch" in rt.verbs]
    if not types and not any(rt.group == group and rt.version == version for rt in RESOURCES.values()):
        return None
    paths: dict[str, Any] = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        paths[_item_path(rt)] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                ],
                "responses": {"200": {"description": "OK"}},
            },
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": paths,
        "components": {"schemas": {}},
    }


def root_document(git_version: str) -> dict[str, Any]:
    """``/openapi/v3``: one entry per served group-version, with a content hash like the real one."""
    entries = {}
    for group, version in sorted({(rt.group, rt.version) for rt in RESOURCES.values()}):
        doc = group_version_document(group, version, git_version)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()
        path = _gv_path(group, version)
        entries[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": entries}
