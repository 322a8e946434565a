"""The hub's RBAC, judged by the real API server's audit log over the whole kube tier (this file
runs last in it): every request the hub made is granted by the deployment's manifests (z2jh's
hub Role and hub_config/), nothing it was refused, and nothing is granted that no request used
unless listed below with the path that needs it. ``gpuburst doctor``'s permission list is held
to the same set."""

from __future__ import annotations

import pytest
from helpers.kubetier import (
    DONORS,
    EXPECTED_REFUSALS,
    HUB_NAMESPACE,
    HUB_RBAC,
    HUB_USER,
    NAMESPACES,
    NOT_THE_HUB,
    OUR_RBAC,
    collected_audit,
)

from jupyter_gpuburst.doctor.permissions import KERNEL_PERMISSIONS, REQUIRED_PERMISSIONS
from jupyter_gpuburst.sim.kube import audit
from jupyter_gpuburst.sim.kube.deployment import donor_kernel_documents
from jupyter_gpuburst.sim.kube.hubaccount import documents, retarget

pytestmark = pytest.mark.kube
# Granted, and needed only on a path the tier does not take yet, each with that path.
UNUSED_BUT_NEEDED: dict[audit.Use, str] = {
    audit.Use("get", "offloading.liqo.io", "namespaceoffloadings"): (
        "read only where create is refused: an admin offloaded the namespace and granted get alone (hub/sites/offloading.py)"
    ),
    **{
        audit.Use(verb, group, resource): (
            "the hub's address in the user namespace, kept where the hub knows its pod's IP (GPUBURST_HUB_POD_IP): "
            "the tier's hub is a local process (hub/address; tests/sim/test_hub_address_names.py)"
        )
        for verb in ("get", "create", "update")
        for group, resource in (("", "services"), ("discovery.k8s.io", "endpointslices"))
    },
}


def hub_rules(manifests):
    """The rules ``manifests`` and each donor's kernel namespace (donor-kernels.yaml) bind to the hub."""
    docs = [retarget(doc, NAMESPACES) for doc in (*documents(manifests), *donor_kernel_documents(DONORS))]
    return audit.grants(docs, HUB_NAMESPACE, "hub")


def test_the_hub_uses_what_its_rbac_grants_and_nothing_else(tmp_path_factory):
    used = audit.uses(collected_audit(tmp_path_factory), HUB_USER, not_from=NOT_THE_HUB)
    assert used, "the hub made no request the audit log recorded"
    rules = hub_rules(HUB_RBAC)
    refused = sorted(str(u) for u, code in used.items() if code == 403 and u not in EXPECTED_REFUSALS)
    assert not refused, f"the API server refused the hub: {refused}"
    ungranted = sorted(str(u) for u in used if not audit.granted(rules, u) and u not in EXPECTED_REFUSALS)
    assert not ungranted, f"used, but granted by nothing: {ungranted}"
    # z2jh's own Role is the chart's to judge; ours must each be used
    ours = audit.granted_uses(hub_rules(OUR_RBAC))
    unused = sorted(str(g) for g in ours if g not in UNUSED_BUT_NEEDED and not any(_covers(g, u) for u in used))
    assert not unused, f"granted, but no request of the tier used it (list it in UNUSED_BUT_NEEDED with its path, or drop it): {unused}"


def _covers(grant: audit.Use, use: audit.Use) -> bool:
    return (grant.verb, grant.group, grant.resource, grant.subresource) == (use.verb, use.group, use.resource, use.subresource) and (
        not grant.namespaced or use.namespaced
    )


def test_doctor_checks_what_the_hub_uses(tmp_path_factory):
    used = {
        (u.verb, u.group, u.resource_path, u.namespaced)
        for u in audit.uses(collected_audit(tmp_path_factory), HUB_USER, not_from=NOT_THE_HUB)
        if u not in EXPECTED_REFUSALS
    }
    checked = {(p.verb, p.group, p.resource, p.namespaced) for p in (*REQUIRED_PERMISSIONS, *KERNEL_PERMISSIONS)}
    missing = sorted(str(u) for u in used - checked)
    assert not missing, f"doctor does not check these requests the hub makes: {missing}"
