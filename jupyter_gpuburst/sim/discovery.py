"""Discovery: the version, API groups and resource lists, and the OpenAPI documents kubectl reads."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim import openapi
from jupyter_gpuburst.sim.apiwire import json_response, not_found_path
from jupyter_gpuburst.sim.resources import RESOURCES, group_versions

Obj = dict[str, Any]


def version(git_version: str) -> Obj:
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-08-13T07:28:49Z",
        "goVersion": "go1.22.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_group(group: str) -> Obj:
    versions = group_versions().get(group)
    if not group or not versions:
        raise not_found_path()
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}


def group_list() -> Obj:
    groups = [api_group(g) for g in group_versions() if g]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(group: str, version: str) -> Obj:
    resources = []
    for rt in RESOURCES.values():
        if rt.group != group or rt.version != version:
            continue
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            kind, verbs = {
                "status": (rt.kind, ["get", "patch", "update"]),
                "binding": ("Binding", ["create"]),
                "log": ("Pod", ["get"]),
                "exec": ("PodExecOptions", ["create", "get"]),
            }[sub]
            resources.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs})
    if not resources:
        raise not_found_path()
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def openapi_document(parts: list[str], git_version: str) -> web.Response:
    if parts == ["v2"]:
        # Empty protobuf document: what kubectl 1.27-1.28 accept when validating.
        return web.Response(body=b"", content_type="application/octet-stream")
    if parts == ["v3"]:
        return json_response(openapi.root_document(git_version))
    if len(parts) >= 3 and parts[0] == "v3":
        if parts[1] == "api" and len(parts) == 3:
            doc = openapi.group_version_document("", parts[2], git_version)
        elif parts[1] == "apis" and len(parts) == 4:
            doc = openapi.group_version_document(parts[2], parts[3], git_version)
        else:
            doc = None
        if doc is not None:
            return json_response(doc)
    raise not_found_path()
