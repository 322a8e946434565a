"""Label and field selectors, parsed and matched as kube-apiserver does.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists),
``!k`` (does not exist), comma-separated (AND). Field selectors: ``f=v``, ``f==v``, ``f!=v`` over
the fields a resource type declares; anything else is ``400 field label not supported: f``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.sim.errors import bad_request
from jupyter_gpuburst.sim.resources import ResourceType

_LABEL_KEY = re.compile(r"^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")
_SET_EXPR = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s+(in|notin)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # != and notin match objects without the label, like kube-apiserver.
        return not present or labels[self.key] not in self.values


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector string; empty or None selects everything."""
    if not text or not text.strip():
        return ()
    reqs = []
    for part in _split_top(text):
        m = _SET_EXPR.match(part)
        if m:
            if m.group(1):
                raise bad_request(f"unable to parse requirement: invalid label selector {text!r}")
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            reqs.append(Requirement(_key(m.group(2), text), m.group(3), values))
            continue
        for op in ("!=", "==", "="):
            if op in part:
                key, _, value = part.partition(op)
                reqs.append(Requirement(_key(key.strip(), text), "!=" if op == "!=" else "=", (value.strip(),)))
                break
        else:
            if part.startswith("!"):
                reqs.append(Requirement(_key(part[1:].strip(), text), "!"))
            else:
                reqs.append(Requirement(_key(part, text), "exists"))
    return tuple(reqs)


def _key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in selector {text!r}")
    return key


def labels_match(reqs: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


def parse_field_selector(text: str | None, allowed: tuple[str, ...]) -> tuple[FieldRequirement, ...]:
    """Parse a field selector, rejecting fields the resource type does not index."""
    if not text or not text.strip():
        return ()
    reqs = []
    for part in _split_top(text):
        for op in ("!=", "==", "="):
            if op in part:
                path, _, value = part.partition(op)
                path = path.strip()
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, op != "!=", value.strip()))
    return tuple(reqs)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field, as the apiserver's field sets render it."""
    if path == "source":  # Events index source.component under "source"
        return str(((obj.get("source") or {}).get("component")) or "")
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all((field_value(obj, r.path) == r.value) == r.equal for r in reqs)


def matcher(label_selector: str | None, field_selector: str | None, allowed_fields: tuple[str, ...]) -> Callable[[Mapping[str, Any]], bool]:
    """One predicate for both selectors; raises 400 on a bad selector before any I/O."""
    lreqs = parse_label_selector(label_selector)
    freqs = parse_field_selector(field_selector, allowed_fields)
    if not lreqs and not freqs:
        return lambda obj: True
    return lambda obj: labels_match(lreqs, obj) and fields_match(freqs, obj)


def select(
    objects: Mapping[tuple[str, str], dict[str, Any]],
    rt: ResourceType,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> list[dict[str, Any]]:
    """Copies of the objects (keyed by (namespace, name)) a list call returns, sorted by key."""
    match = matcher(label_selector, field_selector, rt.selectable_fields)
    return [
        copy.deepcopy(obj)
        for (ns, _name), obj in sorted(objects.items())
        if (namespace is None or not rt.namespaced or ns == namespace) and match(obj)
    ]
