"""RBAC for impersonated requests: the README's rbac.yaml read by the emulator's authorizer."""

from __future__ import annotations

import pytest
from hub_config.readme import apply_rbac_manifest

from jupyter_gpuburst.sim import rbac
from jupyter_gpuburst.sim.store import Store

HUB = "system:serviceaccount:jhub:hub"
G = rbac.RBAC_GROUP


def keyed(kind: str) -> str:
    return {
        "ClusterRole": f"clusterroles.{G}",
        "ClusterRoleBinding": f"clusterrolebindings.{G}",
        "Role": f"roles.{G}",
        "RoleBinding": f"rolebindings.{G}",
    }[kind]


@pytest.fixture
def store() -> Store:
    """A store holding the README's rbac.yaml, as `kubectl apply -n jhub -f` leaves it."""
    store = Store()
    for ns in ("jhub", "other"):
        store.create("namespaces", {"metadata": {"name": ns}})
    apply_rbac_manifest(store, "jhub")
    return store


def hub() -> rbac.Identity:
    identity = rbac.impersonated(HUB, [])
    assert identity is not None
    return identity


def test_an_impersonated_identity_gets_the_groups_kube_apiserver_gives_it():
    assert rbac.impersonated(None, []) is None  # the emulator's admin, never checked
    assert hub().groups == ("system:serviceaccounts", "system:serviceaccounts:jhub", rbac.AUTHENTICATED)
    assert rbac.impersonated(HUB, ["admins"]).groups == ("admins", rbac.AUTHENTICATED)
    assert rbac.impersonated("jane", []).groups == (rbac.AUTHENTICATED,)
    assert rbac.impersonated(rbac.ANONYMOUS, []).groups == ()
    with pytest.raises(ValueError, match="without impersonating a user"):
        rbac.impersonated(None, ["admins"])


@pytest.mark.parametrize(
    ("verb", "group", "resource", "namespace", "allowed"),
    [
        ("watch", "", "nodes", "", True),  # the ClusterRoleBinding, cluster-wide
        ("list", "", "pods", "", True),
        ("list", "", "pods", "other", True),  # a cluster-wide grant reaches every namespace
        ("create", "", "pods", "jhub", True),  # the RoleBinding, in its namespace
        ("create", "", "pods", "other", False),  # ... and nowhere else
        ("delete", "", "nodes", "", False),
        ("get", "", "secrets", "jhub", False),
        # KubeSpawner deletes a deleted user's home volume (delete_pvc), nobody else's namespace's
        ("delete", "", "persistentvolumeclaims", "jhub", True),
        ("delete", "", "persistentvolumeclaims", "other", False),
        ("create", "offloading.liqo.io", "namespaceoffloadings", "jhub", True),
        ("delete", "offloading.liqo.io", "namespaceoffloadings", "jhub", False),
        ("get", "", "namespaceoffloadings", "jhub", False),  # the rule's API group, not the core one
        ("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", True),  # system:basic-user
    ],
)
def test_the_readmes_grant_allows_what_it_names_and_nothing_else(store, verb, group, resource, namespace, allowed):
    asked = rbac.Request(verb, group, resource, namespace=namespace)
    assert rbac.authorize(store, hub(), asked)[0] is allowed


def test_an_allowed_request_names_the_binding_and_the_subject(store):
    _, reason = rbac.authorize(store, hub(), rbac.Request("create", "", "pods", namespace="jhub"))
    assert reason == 'RBAC: allowed by RoleBinding "gpuburst-hub/jhub" of Role "gpuburst-hub" to ServiceAccount "hub/jhub"'
    _, reason = rbac.authorize(store, hub(), rbac.Request("list", "", "nodes"))
    assert reason.startswith('RBAC: allowed by ClusterRoleBinding "gpuburst-hub-inventory" of ClusterRole')


def test_other_identities_and_missing_roles_get_nothing(store):
    jane = rbac.impersonated("jane", [])
    assert rbac.authorize(store, jane, rbac.Request("list", "", "nodes")) == (False, "")
    other_sa = rbac.impersonated("system:serviceaccount:other:hub", [])
    assert rbac.authorize(store, other_sa, rbac.Request("list", "", "nodes"))[0] is False
    admin = rbac.impersonated("root", ["system:masters"])
    assert rbac.authorize(store, admin, rbac.Request("delete", "", "nodes", name="any"))[0] is True
    store.delete(f"roles.{G}", "jhub", "gpuburst-hub")  # a binding to a missing role grants nothing
    assert rbac.authorize(store, hub(), rbac.Request("create", "", "pods", namespace="jhub"))[0] is False


def test_subjects_subresources_and_resource_names_match_as_in_kubernetes(store):
    store.create(
        keyed("Role"),
        {
            "metadata": {"name": "exec-one", "namespace": "jhub"},
            "rules": [
                {"apiGroups": [""], "resources": ["*/exec"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]},
            ],
        },
        "jhub",
    )
    store.create(
        keyed("RoleBinding"),
        {
            "metadata": {"name": "exec-one", "namespace": "jhub"},
            "roleRef": {"apiGroup": G, "kind": "Role", "name": "exec-one"},
            # a service account named without a namespace is the binding's; a group matches by name
            "subjects": [{"kind": "ServiceAccount", "name": "tester"}, {"kind": "Group", "name": "graders"}],
        },
        "jhub",
    )
    tester = rbac.impersonated("system:serviceaccount:jhub:tester", [])
    grader = rbac.impersonated("kim", ["graders"])
    for who in (tester, grader):
        assert rbac.authorize(store, who, rbac.Request("create", "", "pods", "exec", "jhub", "p"))[0] is True
        assert rbac.authorize(store, who, rbac.Request("create", "", "pods", "", "jhub", "p"))[0] is False
        assert rbac.authorize(store, who, rbac.Request("get", "", "configmaps", "", "jhub", "settings"))[0] is True
        assert rbac.authorize(store, who, rbac.Request("get", "", "configmaps", "", "jhub", "other"))[0] is False
        assert rbac.authorize(store, who, rbac.Request("list", "", "configmaps", "", "jhub"))[0] is False


def test_a_refusal_reads_as_kube_apiservers():
    who = hub()
    assert rbac.forbidden_message(who, rbac.Request("list", "", "nodes")) == (
        'nodes is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    assert rbac.forbidden_message(who, rbac.Request("create", "", "pods", "exec", "jhub", "p")) == (
        'pods "p" is forbidden: User "system:serviceaccount:jhub:hub" cannot create resource "pods/exec" '
        'in API group "" in the namespace "jhub"'
    )
    assert rbac.forbidden_message(who, rbac.Request("get", "storage.k8s.io", "storageclasses", name="x")).startswith(
        'storageclasses.storage.k8s.io "x" is forbidden'
    )
