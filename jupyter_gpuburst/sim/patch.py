"""The three PATCH flavours kube-apiserver accepts.

- ``application/json-patch+json``: RFC 6902, through the ``jsonpatch`` library.
- ``application/merge-patch+json``: RFC 7386 (lists replaced whole, ``null`` deletes a key).
- ``application/strategic-merge-patch+json``: Kubernetes' strategic merge for the lists below,
  merged element-wise by their patch merge key as in the Kubernetes API types; every other list
  is replaced whole, as it is for lists without a patch strategy in Kubernetes (``tolerations``,
  ``args``, ``command`` ...). Directives: ``$patch: replace|delete`` on maps and list elements,
  ``$deleteFromPrimitiveList/<field>``; ``$setElementOrder/<field>`` and ``$retainKeys`` are
  accepted and ignored. Custom resources only accept the first two flavours, as in Kubernetes.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from jupyter_gpuburst.sim.errors import ApiError, bad_request, unsupported_media_type

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# field name -> patch merge key, from the Kubernetes core/v1 and meta/v1 types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "addresses": "type",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Container ports merge on containerPort, Service ports on port.
PORT_KEYS = ("containerPort", "port")
# Lists of scalars merged as sets.
PRIMITIVE_MERGE = frozenset({"finalizers"})


def apply_patch(original: dict[str, Any], patch: Any, content_type: str, *, custom: bool = False) -> dict[str, Any]:
    """Apply ``patch`` to a copy of ``original``; 415 for an unknown type, 400/422 for bad patches."""
    content_type = (content_type or "").split(";")[0].strip().lower()
    if content_type not in PATCH_TYPES or (custom and content_type == STRATEGIC_MERGE_PATCH):
        raise unsupported_media_type(content_type)
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
        try:
            return jsonpatch.apply_patch(original, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}") from None
    if not isinstance(patch, dict):
        raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
    if content_type == MERGE_PATCH:
        return merge_patch(original, patch)
    return strategic_merge(original, patch)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(original: Any, patch: dict[str, Any]) -> Any:
    """Kubernetes strategic merge patch of a map (see the module docstring)."""
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list):
            if key in PRIMITIVE_MERGE:
                result[key] = result[key] + [v for v in value if v not in result[key]]
            elif (merge_key := _merge_key(key, value, result[key])) is not None:
                result[key] = _merge_list(result[key], value, merge_key)
            else:
                result[key] = _strip_directives(value)
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    return result


def _merge_key(field: str, patch_list: list[Any], original: list[Any]) -> str | None:
    if field == "ports":
        for candidate in PORT_KEYS:
            if any(isinstance(e, dict) and candidate in e for e in patch_list + original):
                return candidate
        return None
    return MERGE_KEYS.get(field)


def _merge_list(original: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [_strip_directives(e) for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace")]
    result = copy.deepcopy(original)
    for element in patch:
        if not isinstance(element, dict) or merge_key not in element:
            raise bad_request(f"map: {element!r} does not contain declared merge key: {merge_key}")
        index = next((i for i, e in enumerate(result) if isinstance(e, dict) and e.get(merge_key) == element[merge_key]), None)
        if element.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(_strip_directives(element))
        else:
            result[index] = strategic_merge(result[index], element)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
