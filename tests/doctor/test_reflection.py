"""doctor warns where Liqo would reflect the hub's Secrets or every Secret of an offloaded namespace."""

from __future__ import annotations

import pytest
from helpers.doctor import healthy

from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.doctor import Status
from jupyter_gpuburst.doctor.reflection import check_hub_namespace, check_secret_reflection, hub_namespace_of


def template(secret: dict | None) -> dict:
    spec = {"reflectorsConfig": {"secret": secret}} if secret is not None else {}
    return {"metadata": {"name": "virtual-kubelet-default", "namespace": "liqo"}, "spec": spec}


def reflection(report: doctor.Report) -> list[doctor.Finding]:
    return [f for f in report.findings if f.area == "reflection"]


@pytest.mark.parametrize(
    ("hub", "offloaded", "status", "words"),
    [
        ("jhub", False, Status.OK, "apart from the user namespace"),
        ("jhub-users", False, Status.WARN, "user servers run in the hub's namespace"),
        ("jhub", True, Status.WARN, "offloaded: Liqo reflects the hub's Secrets"),
        (None, False, Status.WARN, "not checked"),
    ],
)
def test_the_hub_namespace_is_apart_and_not_offloaded(hub, offloaded, status, words):
    findings = check_hub_namespace(hub, "jhub-users", liqo.namespace_offloading(hub) if offloaded else None)
    assert [f.status for f in findings] == [status]
    assert words in findings[0].detail


@pytest.mark.parametrize(
    ("templates", "status", "words"),
    [
        ([template(None)], Status.WARN, "(DenyList)"),  # Liqo's default
        ([template({"workers": 10, "type": "DenyList"})], Status.WARN, "(DenyList)"),
        ([template({"workers": 10, "type": "AllowList"})], Status.OK, liqo.ALLOW_REFLECTION_ANNOTATION),
        ([template({"workers": 0})], Status.OK, "not reflected"),
        ([], Status.WARN, "were not found"),
        (None, Status.WARN, "cannot be read"),
    ],
)
def test_secrets_reflected_by_default_are_a_warning(templates, status, words):
    (finding,) = check_secret_reflection(templates)
    assert finding.status is status and words in finding.detail
    assert (finding.fix is not None) == (status is Status.WARN)
    if status is Status.WARN:
        assert "offloading.reflection.secret.type=AllowList" in finding.fix


def test_diagnose_warns_of_an_offloaded_hub_namespace_and_a_deny_list():
    offloadings = {"jhub": liqo.namespace_offloading("jhub"), "jhub-users": liqo.namespace_offloading("jhub-users")}
    view = healthy(offloadings=offloadings, templates=[template(None)])
    report = doctor.diagnose(view, "ctx", "jhub-users", hub_namespace="jhub")
    assert report.ok  # warnings: the hub still runs
    assert [(f.subject, f.status) for f in reflection(report)] == [
        ("hub namespace jhub", Status.WARN),
        ("Secrets (VkOptionsTemplate liqo/virtual-kubelet-default)", Status.WARN),
    ]
    view = healthy(offloadings={"jhub-users": offloadings["jhub-users"]}, templates=[template({"workers": 10, "type": "AllowList"})])
    report = doctor.diagnose(view, "ctx", "jhub-users", hub_namespace="jhub")
    assert [f.status for f in reflection(report)] == [Status.OK, Status.OK]


def test_the_hub_namespace_comes_from_its_service_account():
    assert hub_namespace_of("system:serviceaccount:jhub:hub") == "jhub"
    assert hub_namespace_of("alice") is None and hub_namespace_of(None) is None
    assert hub_namespace_of("system:serviceaccount::hub") is None


def test_a_donor_kernel_namespace_offloaded_to_other_donors_too_is_a_warning():
    from helpers.doctor import node

    from jupyter_gpuburst.doctor.reflection import check_donor_kernel_namespaces

    donors = [node("liqo-donor-1", 8, donor="donor-1"), node("liqo-donor-2", 8, donor="donor-2")]
    ns = "jhub-users-kernels-donor-1"
    (finding,) = check_donor_kernel_namespaces("jhub-users", donors, {ns: liqo.namespace_offloading(ns)})
    assert finding.status is Status.WARN and finding.subject == f"namespace {ns}" and "offloaded to donor-2 too" in finding.detail
    (finding,) = check_donor_kernel_namespaces("jhub-users", donors, {ns: liqo.namespace_offloading(ns, "Remote", ["donor-1"])})
    assert finding.status is Status.OK
    # not offloaded yet: the hub offloads it to that donor alone with its first kernel there
    assert check_donor_kernel_namespaces("jhub-users", donors, {}) == []
