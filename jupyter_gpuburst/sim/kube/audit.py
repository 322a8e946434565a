"""What an identity did on the real control plane, from kube-apiserver's audit log, and what its
RBAC grants: the ground truth for the hub's permissions.

Each audit event (JSON, one per line, at Metadata level: ``controlplane.AUDIT_POLICY``) names the
user, the verb, the resource, its subresource and namespace, and the response code, so a request
RBAC refused shows as one with code 403; admission's annotations (Pod Security's audit
violations) ride on it, and a write's event carries the body the client sent (``writes``), but a
Secret's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, order=True)
class Use:
    """One kind of request: verb on group/resource[/subresource], cluster-wide when ``namespaced`` is False."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespaced: bool = True

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        group = self.group or "core"
        scope = "in the namespace" if self.namespaced else "cluster-wide"
        return f"{self.verb} {self.resource_path} ({group}) {scope}"


def events(audit_logs: Iterable[Path], username: str, *, not_from: str | None = None) -> Iterator[dict[str, Any]]:
    """``username``'s completed requests, in the order each log has them; with ``not_from``, but
    those of a client whose user agent starts so (``gpuburst doctor`` run with the same token)."""
    for path in audit_logs:
        if not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines():
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != username or event.get("stage") != "ResponseComplete":
                continue
            if not_from is not None and str(event.get("userAgent") or "").startswith(not_from):
                continue
            yield event


def writes(audit_logs: Iterable[Path], username: str, *, not_from: str | None = None) -> Iterator[dict[str, Any]]:
    """``username``'s creates, updates and patches of a resource that the API server carried
    out, each with the body it sent (``requestObject``)."""
    for event in events(audit_logs, username, not_from=not_from):
        code = (event.get("responseStatus") or {}).get("code", 0)
        if event["verb"] in ("create", "update", "patch") and event.get("objectRef") and "requestObject" in event and code < 300:
            yield event


def uses(audit_logs: Iterable[Path], username: str, *, not_from: str | None = None) -> dict[Use, int]:
    """Every kind of request ``username`` made, with the worst response code seen for it."""
    found: dict[Use, int] = {}
    for event in events(audit_logs, username, not_from=not_from):
        ref = event.get("objectRef")
        if not ref:
            continue  # a non-resource URL (discovery)
        use = Use(event["verb"], ref.get("apiGroup", ""), ref["resource"], ref.get("subresource", ""), bool(ref.get("namespace")))
        code = (event.get("responseStatus") or {}).get("code", 0)
        found[use] = max(found.get(use, 0), code)
    return found


def _rule_grants(rule: dict[str, Any], use: Use) -> bool:
    groups, resources, verbs = rule.get("apiGroups", []), rule.get("resources", []), rule.get("verbs", [])
    return (
        ("*" in groups or use.group in groups)
        and ("*" in resources or use.resource_path in resources)
        and ("*" in verbs or use.verb in verbs)
    )


def grants(documents: Iterable[dict[str, Any]], namespace: str, service_account: str) -> list[tuple[dict[str, Any], bool]]:
    """The rules bound to ``namespace/service_account``: (rule, cluster_wide)."""
    docs = list(documents)
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == service_account and s.get("namespace") == namespace for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role_ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        if role is None:
            continue
        cluster_wide = binding["kind"] == "ClusterRoleBinding"
        out.extend((rule, cluster_wide) for rule in role.get("rules", []))
    return out


def granted(rules: list[tuple[dict[str, Any], bool]], use: Use) -> bool:
    """Whether a namespaced use is granted by a namespaced or cluster-wide rule, a cluster-wide one only by the latter."""
    return any(_rule_grants(rule, use) and (cluster_wide or use.namespaced) for rule, cluster_wide in rules)


def granted_uses(rules: list[tuple[dict[str, Any], bool]]) -> set[Use]:
    """Every (verb, group, resource) the rules name, at the scope they grant it."""
    out = set()
    for rule, cluster_wide in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                name, _, sub = resource.partition("/")
                for verb in rule.get("verbs", []):
                    out.add(Use(verb, group, name, sub, not cluster_wide))
    return out
