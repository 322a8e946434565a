"""Kubernetes node selection as kube-scheduler reads it: nodeSelector, required node affinity, and
the NodeSelector of a volume's node affinity or of a Liqo NamespaceOffloading's clusterSelector.

One matcher for the emulator's scheduler and for ``gpuburst doctor``, with the scheduler's
semantics (k8s.io/component-helpers/scheduling/corev1/nodeaffinity): the terms of a NodeSelector
are ORed, the requirements of one term are ANDed, and a term with no requirement at all matches
no node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def requirement_matches(requirement: Obj, labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` (or ``matchFields``) entry against a node's labels (or fields)."""
    key, op, values = requirement.get("key"), requirement.get("operator"), requirement.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Obj, labels: Mapping[str, str], name: str | None = None) -> bool:
    """A NodeSelectorTerm against a node's labels and name; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    node_fields = {"metadata.name": name} if name is not None else {}
    return all(requirement_matches(e, labels) for e in expressions) and all(requirement_matches(f, node_fields) for f in fields)


def selector_matches(selector: Obj | None, labels: Mapping[str, str], name: str | None = None) -> bool:
    """A NodeSelector (``nodeSelectorTerms``, ORed) against a node; no terms matches nothing."""
    return any(term_matches(t, labels, name) for t in (selector or {}).get("nodeSelectorTerms") or [])


def matches_node_affinity(pod: Obj, node: Obj) -> bool:
    """A pod's nodeSelector (every label equal) and required node affinity (any term) on a node."""
    spec = pod.get("spec") or {}
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required or required.get("nodeSelectorTerms") is None:
        return True
    return selector_matches(required, labels, metadata.get("name"))
