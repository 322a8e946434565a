"""Server-side apply (``PATCH`` with ``application/apply-patch+yaml``).

What kube-apiserver does, for the fields a client can see:

- ``fieldManager`` is required; the body is YAML or JSON holding apiVersion, kind and name.
- Applying to a missing object creates it (201).
- Every manager's fields are recorded in ``metadata.managedFields`` (``FieldsV1``: ``f:<field>``,
  ``k:{<merge key>}`` for list items merged by key, ``v:<value>`` for set items, ``.`` for the
  item itself).
- An object that has no managedFields yet is owned, field by field, by ``before-first-apply``.
- Changing a field another manager owns is a 409 Conflict naming each field, unless
  ``force=true``, which takes the field over. Setting it to the value it has is shared ownership.
- A field the applier set before and leaves out now is removed, unless another manager owns it.

Lists are merged by their Kubernetes merge keys (``sim.patch.MERGE_KEYS``); other lists are
atomic. Non-apply writes keep the managedFields they are sent with and do not move ownership;
that is this emulator's limit.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from jupyter_gpuburst.sim.errors import ApiError, bad_request
from jupyter_gpuburst.sim.patch import MERGE_KEYS, PORT_KEYS, PRIMITIVE_MERGE

APPLY_PATCH = "application/apply-patch+yaml"
BEFORE_FIRST_APPLY = "before-first-apply"
Obj = dict[str, Any]
Path = tuple[str, ...]
# Parts of metadata the server owns; never a manager's field.
_SERVER_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)


def parse_body(raw: bytes) -> Obj:
    """The applied configuration; 400 unless it is one YAML/JSON object."""
    try:
        body = yaml.safe_load(raw.decode() if raw else "")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise bad_request(f"error decoding YAML: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the body of the request is not an object")
    return body


def _list_key(field: str, item: Any) -> str | None:
    """The ``k:{...}`` / ``v:...`` member name of a list item, None for an atomic list."""
    if field in PRIMITIVE_MERGE:
        return "v:" + json.dumps(item, separators=(",", ":"))
    if not isinstance(item, dict):
        return None
    if field == "ports":
        for key in PORT_KEYS:
            if key in item:
                keys = {key: item[key]}
                if "protocol" in item or key == "containerPort":
                    keys["protocol"] = item.get("protocol", "TCP")
                return "k:" + json.dumps(keys, separators=(",", ":"), sort_keys=True)
        return None
    key = MERGE_KEYS.get(field)
    if key and key in item:
        return "k:" + json.dumps({key: item[key]}, separators=(",", ":"))
    return None


def _is_keyed(field: str, items: list) -> bool:
    return bool(items) and all(_list_key(field, i) is not None for i in items)


def field_set(obj: Any, top: bool = True) -> Obj:
    """The FieldsV1 set of the fields present in ``obj`` (an applied configuration)."""
    out: Obj = {}
    if not isinstance(obj, dict):
        return out
    for name, value in obj.items():
        if top and name in ("apiVersion", "kind", "status"):
            continue
        if top and name == "metadata":
            meta = {k: v for k, v in (value or {}).items() if k not in _SERVER_META}
            sub = field_set(meta, top=False)
            if sub:
                out["f:metadata"] = sub
            continue
        out["f:" + name] = _value_set(name, value)
    return out


def _value_set(name: str, value: Any) -> Obj:
    if isinstance(value, dict):
        return field_set(value, top=False)
    if isinstance(value, list) and _is_keyed(name, value):
        out: Obj = {}
        for item in value:
            sub = field_set(item, top=False) if isinstance(item, dict) else {}
            out[_list_key(name, item)] = {".": {}, **sub}
        return out
    return {}


def leaves(fields: Obj, prefix: Path = ()) -> set[Path]:
    """Paths of the owned leaves (an empty set node is a leaf; ``.`` marks an owned item)."""
    out: set[Path] = set()
    for key, sub in fields.items():
        if key == ".":
            out.add(prefix)
            continue
        path = (*prefix, key)
        if sub:
            out |= leaves(sub, path)
        else:
            out.add(path)
    return out


def from_leaves(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    # an item path that also has children keeps its "." marker
    for path in paths:
        node = root
        for part in path:
            node = node[part]
        if node and path and path[-1].startswith(("k:", "v:")):
            node["."] = {}
    return root


def value_at(obj: Any, path: Path) -> tuple[bool, Any]:
    """(present, value) of the field at a FieldsV1 path."""
    node = obj
    parent_field = ""
    for part in path:
        if part.startswith("f:"):
            if not isinstance(node, dict) or part[2:] not in node:
                return False, None
            parent_field = part[2:]
            node = node[part[2:]]
        else:
            if not isinstance(node, list):
                return False, None
            match = [i for i in node if _list_key(parent_field, i) == part]
            if not match:
                return False, None
            node = match[0]
    return True, node


def _remove(obj: Any, path: Path) -> None:
    node = obj
    parent_field = ""
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if part.startswith("f:"):
            if not isinstance(node, dict) or part[2:] not in node:
                return
            if last:
                del node[part[2:]]
                return
            parent_field = part[2:]
            node = node[part[2:]]
        else:
            if not isinstance(node, list):
                return
            idx = [j for j, item in enumerate(node) if _list_key(parent_field, item) == part]
            if not idx:
                return
            if last:
                del node[idx[0]]
                return
            node = node[idx[0]]


def merge(current: Any, applied: Any, name: str = "") -> Any:
    """The applied configuration merged into the live object (maps by key, lists by merge key)."""
    if isinstance(current, dict) and isinstance(applied, dict):
        out = dict(current)
        for key, value in applied.items():
            out[key] = merge(current.get(key), value, key) if key in current else copy.deepcopy(value)
        return out
    if (
        isinstance(current, list)
        and isinstance(applied, list)
        and _is_keyed(name, applied)
        and all(_list_key(name, i) is not None for i in current)
    ):
        by_key = {_list_key(name, i): i for i in applied}
        out_list = []
        for item in current:
            key = _list_key(name, item)
            out_list.append(merge(item, by_key.pop(key), name) if key in by_key else item)
        out_list.extend(copy.deepcopy(v) for v in by_key.values())
        return out_list
    return copy.deepcopy(applied)


def _owner_sets(meta: Obj, current: Obj) -> list[tuple[Obj, set[Path]]]:
    entries = meta.get("managedFields")
    if not entries:
        # Objects written without apply: one owner of everything, as kube-apiserver assumes.
        fields = field_set(current)
        return (
            [({"manager": BEFORE_FIRST_APPLY, "operation": "Update", "apiVersion": current.get("apiVersion")}, leaves(fields))]
            if fields
            else []
        )
    return [(entry, leaves(entry.get("fieldsV1") or {})) for entry in entries]


def _conflict(conflicts: list[tuple[str, str, Path]]) -> ApiError:
    def dotted(path: Path) -> str:
        out = ""
        for part in path:
            if part.startswith("f:"):
                out += "." + part[2:]
            elif part.startswith("k:"):
                keys = json.loads(part[2:])
                out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
            else:
                out += f"[={part[2:]}]"
        return out

    causes = [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}" using {v}', "field": dotted(p)} for m, v, p in conflicts]
    if len(conflicts) == 1:
        m, v, p = conflicts[0]
        message = f'Apply failed with 1 conflict: conflict with "{m}" using {v}: {dotted(p)}'
    else:
        lines = "".join(f"\n- {c['message']}: {c['field']}" for c in causes)
        message = f"Apply failed with {len(conflicts)} conflicts:{lines}"
    return ApiError(409, "Conflict", message, {"causes": causes})


def apply(current: Obj | None, applied: Obj, manager: str, *, force: bool, now: str) -> Obj:
    """The object after ``manager`` applies ``applied`` (a new one when ``current`` is None)."""
    entry = {"manager": manager, "operation": "Apply", "apiVersion": applied.get("apiVersion"), "time": now, "fieldsType": "FieldsV1"}
    new_fields = field_set(applied)
    if current is None:
        obj = copy.deepcopy(applied)
        obj.setdefault("metadata", {})["managedFields"] = [{**entry, "fieldsV1": new_fields}]
        return obj
    new_paths = leaves(new_fields)
    owners = _owner_sets(current.get("metadata") or {}, current)
    conflicts = []
    for owner, paths in owners:
        if owner.get("manager") == manager and owner.get("operation") == "Apply":
            continue
        for path in sorted(paths & new_paths):
            if path and path[-1].startswith("k:"):
                continue  # owning a keyed item itself ("."): its fields are compared one by one
            present, live = value_at(current, path)
            _, wanted = value_at(applied, path)
            if present and live != wanted:
                conflicts.append((owner.get("manager", ""), owner.get("apiVersion") or "v1", path))
    if conflicts and not force:
        raise _conflict(conflicts)
    taken = {c[2] for c in conflicts}
    previous = next((paths for owner, paths in owners if owner.get("manager") == manager and owner.get("operation") == "Apply"), set())
    others = (
        set().union(*(paths for owner, paths in owners if not (owner.get("manager") == manager and owner.get("operation") == "Apply")))
        - taken
    )
    result = merge(copy.deepcopy(current), {k: v for k, v in applied.items() if k != "status"})
    for path in sorted(previous - new_paths - others, key=len, reverse=True):
        _remove(result, path)
    managed = []
    for owner, paths in owners:
        if owner.get("manager") == manager and owner.get("operation") == "Apply":
            continue
        kept = paths - taken
        if kept:
            managed.append({**{k: v for k, v in owner.items() if k != "fieldsV1"}, "fieldsType": "FieldsV1", "fieldsV1": from_leaves(kept)})
    managed.append({**entry, "fieldsV1": new_fields})
    result.setdefault("metadata", {})["managedFields"] = managed
    return result
