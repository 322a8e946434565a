"""Role-based access control, answered as kube-apiserver's RBAC authorizer answers it, for
requests made as another identity (``kubectl --as``, ``gpuburst doctor --as``).

The emulator's own user, the one in its kubeconfig, is a cluster admin (group ``system:masters``),
as a new cluster's admin credentials are: its requests are never checked. A request that
impersonates a user (``Impersonate-User``, ``Impersonate-Group``) is authorized against the
stored ClusterRoles, Roles and their bindings, and a SelfSubjectAccessReview made that way
answers for that identity. Not modelled: ClusterRole aggregation (an aggregated role counts only
the rules written in it), and the bootstrap roles but one: every authenticated identity may
create SelfSubjectAccessReviews (``system:basic-user``). Discovery is not authorized.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.sim.store import Store

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"
REVIEWS = ("authorization.k8s.io", "selfsubjectaccessreviews")

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Request:
    """What is asked: the attributes a SubjectAccessReview's ``resourceAttributes`` carry."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def impersonated(user: str | None, groups: Iterable[str]) -> Identity | None:
    """The identity a request acts as, from its impersonation headers; None for the admin's own.

    As kube-apiserver's impersonation filter: a service account's groups follow from its name
    when none are given, and every identity but the anonymous one is also authenticated."""
    groups = [g for g in groups if g]
    if not user:
        if groups:
            raise ValueError(f"requested groups {groups} without impersonating a user")
        return None
    if user.startswith(SERVICE_ACCOUNT_PREFIX) and not groups:
        namespace = user[len(SERVICE_ACCOUNT_PREFIX) :].split(":", 1)[0]
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    if user != ANONYMOUS and AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
        groups.append(AUTHENTICATED)
    return Identity(user, tuple(groups))


def authorize(store: Store, who: Identity, asked: Request) -> tuple[bool, str]:
    """Whether ``who`` may do ``asked``, and the reason kube-apiserver gives when it may."""
    if MASTERS in who.groups:
        return True, ""
    if (asked.group, asked.resource) == REVIEWS and asked.verb == "create" and AUTHENTICATED in who.groups:
        return True, 'RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user"'
    bindings = [(b, None) for b in store.list(f"clusterrolebindings.{RBAC_GROUP}")[0]]
    if asked.namespace:
        bindings += [(b, asked.namespace) for b in store.list(f"rolebindings.{RBAC_GROUP}", asked.namespace)[0]]
    for binding, namespace in bindings:
        subject = _subject_matching(binding, namespace, who)
        if subject is None:
            continue
        ref = binding.get("roleRef") or {}
        for rule in _rules(store, ref, namespace):
            if _allows(rule, asked):
                kind = "RoleBinding" if namespace else "ClusterRoleBinding"
                name = binding["metadata"]["name"] + (f"/{namespace}" if namespace else "")
                return True, f'RBAC: allowed by {kind} "{name}" of {ref.get("kind")} "{ref.get("name")}" to {subject}'
    return False, ""


def forbidden_message(who: Identity, asked: Request) -> str:
    """kube-apiserver's words for a request RBAC did not allow."""
    resource = asked.resource + (f"/{asked.subresource}" if asked.subresource else "")
    qualified = f"{asked.resource}.{asked.group}" if asked.group else asked.resource
    target = f'{qualified} "{asked.name}"' if asked.name else qualified
    scope = f'in the namespace "{asked.namespace}"' if asked.namespace else "at the cluster scope"
    return f'{target} is forbidden: User "{who.user}" cannot {asked.verb} resource "{resource}" in API group "{asked.group}" {scope}'


def _subject_matching(binding: Obj, namespace: str | None, who: Identity) -> str | None:
    """The binding's subject that ``who`` is, described as kube-apiserver does; else None."""
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User" and name == who.user:
            return f'User "{name}"'
        if kind == "Group" and name in who.groups:
            return f'Group "{name}"'
        if kind == "ServiceAccount":
            # a RoleBinding's service account without a namespace is one of the binding's
            sa_namespace = subject.get("namespace") or namespace or ""
            if who.user == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{name}":
                return f'ServiceAccount "{name}/{sa_namespace}"'
    return None


def _rules(store: Store, ref: Obj, namespace: str | None) -> list[Obj]:
    """The rules a binding's roleRef grants; none when the role is missing (as on a cluster)."""
    kind, name = ref.get("kind"), ref.get("name", "")
    if kind == "ClusterRole" and store.exists(f"clusterroles.{RBAC_GROUP}", None, name):
        return store.get(f"clusterroles.{RBAC_GROUP}", None, name).get("rules") or []
    if kind == "Role" and namespace and store.exists(f"roles.{RBAC_GROUP}", namespace, name):
        return store.get(f"roles.{RBAC_GROUP}", namespace, name).get("rules") or []
    return []


def _allows(rule: Obj, asked: Request) -> bool:
    if not _has(rule.get("verbs"), asked.verb) or not _has(rule.get("apiGroups"), asked.group):
        return False
    resources = rule.get("resources") or []
    wanted = asked.resource + (f"/{asked.subresource}" if asked.subresource else "")
    if not any(r in ("*", wanted) or (asked.subresource and r == f"*/{asked.subresource}") for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or asked.name in names


def _has(values: Iterable[str] | None, value: str) -> bool:
    return any(v in ("*", value) for v in values or [])
