"""doctor's checks against a fake cluster view: each missing piece is a FAIL with a fix."""

from __future__ import annotations

import json
import re

import pytest
from helpers.doctor import FakeCluster, healthy, node

from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.doctor import Status


def failed(report: doctor.Report) -> list[doctor.Finding]:
    return [f for f in report.findings if f.status is Status.FAIL]


def test_healthy_cluster_passes_and_counts_capacity():
    report = doctor.diagnose(healthy(), "ctx", "jhub")
    assert report.ok, failed(report)
    sites = {s["site"]: s for s in report.as_dict()["capacity"]["sites"]}
    assert sites["origin"]["resources"]["nvidia.com/gpu"] == {"allocatable": 2, "requested": 1, "free": 1}
    assert sites["donor-1"]["resources"]["nvidia.com/gpu"]["free"] == 8
    subjects = {f.subject for f in report.findings}
    assert "donor donor-1 (node liqo-donor-1)" in subjects and "node gpu-a" in subjects


def test_every_required_permission_is_reviewed_in_the_right_scope():
    cluster = healthy()
    doctor.diagnose(cluster, "ctx", "jhub")
    asked = set(cluster.reviews)
    for perm in doctor.REQUIRED_PERMISSIONS:
        assert (perm.verb, perm.group, perm.resource, "jhub" if perm.namespaced else None) in asked
    assert ("list", "", "nodes", None) in asked
    assert ("create", liqo.OFFLOADING_GROUP, liqo.NAMESPACE_OFFLOADING_PLURAL, "jhub") in asked


def test_notready_donor_fails_and_names_the_peering_fix():
    cluster = healthy(nodes=[node("gpu-a", 2), node("liqo-donor-1", 8, donor="donor-1", ready=False)])
    report = doctor.diagnose(cluster, "ctx", "jhub")
    assert not report.ok
    [bad] = failed(report)
    assert bad.subject == "donor donor-1 (node liqo-donor-1)"
    assert "NotReady" in bad.detail and "peering lost" in bad.detail
    assert "liqoctl info peer donor-1" in bad.fix
    assert report.as_dict()["capacity"]["sites"][0]["site"] == "donor-1"  # present, just not ready


def test_donor_without_gpu_grant_fails_with_a_peering_that_grants_them():
    cluster = healthy(nodes=[node("gpu-a", 2), node("liqo-donor-1", 0, donor="donor-1")])
    [bad] = failed(doctor.diagnose(cluster, "ctx", "jhub"))
    assert "grants no GPUs" in bad.detail
    assert "liqoctl peer --remote-kubeconfig <donor-1 kubeconfig> --cpu <C> --memory <M> --resource nvidia.com/gpu=<N>" in bad.fix
    assert "resourceslice" not in bad.fix


def test_cordoned_donor_is_a_warning_not_a_failure():
    cluster = healthy(nodes=[node("gpu-a", 2), node("liqo-donor-1", 4, donor="donor-1", unschedulable=True)])
    report = doctor.diagnose(cluster, "ctx", "jhub")
    assert report.ok
    assert any(f.status is Status.WARN and "kubectl uncordon liqo-donor-1" == f.fix for f in report.findings)


def test_no_donor_at_all_fails():
    report = doctor.diagnose(healthy(nodes=[node("gpu-a", 2)]), "ctx", "jhub")
    [bad] = failed(report)
    assert bad.subject == "virtual nodes" and "liqoctl peer" in bad.fix


def test_no_local_gpu_is_only_a_warning():
    report = doctor.diagnose(healthy(nodes=[node("cpu-a"), node("liqo-donor-1", 8, donor="donor-1")]), "ctx", "jhub")
    assert report.ok
    assert any(f.area == "origin" and f.status is Status.WARN for f in report.findings)


def test_liqo_not_installed_fails_and_skips_offloading_lookup():
    cluster = healthy(groups={"apps"}, offloadings={})
    report = doctor.diagnose(cluster, "ctx", "jhub")
    bad = failed(report)
    assert [f.subject for f in bad if f.area == "liqo"] == ["Liqo API"]
    assert not any(f.area == "offloading" for f in report.findings)


def test_namespace_not_offloaded_is_a_warning_when_the_spawner_may_offload_it():
    report = doctor.diagnose(healthy(offloadings={}), "ctx", "jhub")
    assert report.ok
    [warn] = [f for f in report.findings if f.area == "offloading"]
    assert warn.status is Status.WARN and "the spawner creates the NamespaceOffloading" in warn.detail
    assert "liqoctl offload namespace jhub" in warn.fix


def test_namespace_not_offloaded_fails_with_liqoctl_and_manifest_fix_when_the_spawner_may_not():
    report = doctor.diagnose(healthy(offloadings={}, denied={("create", "namespaceoffloadings")}), "ctx", "jhub")
    [bad] = [f for f in failed(report) if f.area == "offloading"]
    assert bad.area == "offloading" and bad.subject == "namespace jhub"
    assert "liqoctl offload namespace jhub --pod-offloading-strategy LocalAndRemote" in bad.fix
    manifest = json.loads(bad.fix.split("<<< '", 1)[1].rstrip("'"))
    assert manifest == liqo.namespace_offloading("jhub")


@pytest.mark.parametrize(
    "phase,status", [("Ready", Status.OK), ("InProgress", Status.WARN), ("AllFailed", Status.FAIL), ("SomeFailed", Status.FAIL)]
)
def test_offloading_phase(phase, status):
    offloading = liqo.namespace_offloading("jhub")
    offloading["status"] = {"offloadingPhase": phase}
    findings = doctor.check_offloading(offloading, "jhub", [node("v", 4, donor="donor-1")])
    assert [f.status for f in findings] == [status]


def test_remote_only_strategy_warns_that_local_gpus_are_unusable():
    findings = doctor.check_offloading(liqo.namespace_offloading("jhub", strategy="Remote"), "jhub", [])
    assert findings[0].status is Status.WARN and "origin's own GPUs" in findings[0].detail


def test_cluster_selector_that_leaves_a_donor_out_is_flagged():
    offloading = liqo.namespace_offloading("jhub", cluster_ids=["donor-1"])
    donors = [node("v1", 4, donor="donor-1"), node("v2", 4, donor="donor-2")]
    findings = doctor.check_offloading(offloading, "jhub", donors)
    flagged = [f.subject for f in findings if f.status is Status.WARN]
    assert flagged == ["namespace jhub -> donor donor-2"]


def test_denied_permissions_fail_with_one_minimal_grant():
    cluster = healthy(denied={("watch", "nodes"), ("create", "namespaceoffloadings"), ("delete", "pods")})
    report = doctor.diagnose(cluster, "ctx", "jhub")
    bad = failed(report)
    assert sorted((f.subject, f.detail.split(" (")[0]) for f in bad) == sorted(
        [
            ("nodes cluster-wide", "denied watch"),
            (f"namespaceoffloadings.{liqo.OFFLOADING_GROUP} in jhub", "denied create"),
            ("pods in jhub", "denied delete"),
        ]
    )
    fix = bad[0].fix
    assert all(f.fix == fix for f in bad)
    assert "kubectl create clusterrole gpuburst-nodes-all --verb=watch --resource=nodes" in fix
    assert f"--verb=create --resource=namespaceoffloadings.{liqo.OFFLOADING_GROUP}" in fix
    assert "kubectl create role gpuburst-pods -n jhub --verb=delete --resource=pods" in fix
    # the cluster-wide pod list is allowed here, so no grant for it is suggested
    assert "--verb=list" not in fix


def test_render_report_lists_each_fix_once():
    cluster = healthy(offloadings={}, denied={("get", "pods"), ("list", "events"), ("create", "namespaceoffloadings")})
    text = doctor.render_report(doctor.diagnose(cluster, "ctx", "jhub"))
    assert "Fixes:" in text and text.count("kubectl apply -n jhub -f hub_config/rbac.yaml") == 1
    assert "4 needed piece(s) missing." in text
    assert re.search(r"^origin +origin +yes +nvidia.com/gpu +1/2$", text, re.M)  # the capacity table follows


def test_capacity_rows_cover_mig_slices_and_not_ready_sites():
    view = FakeCluster(nodes=[node("mig-a", 7, resource="nvidia.com/mig-1g.10gb"), node("v", 8, donor="d", ready=False)])
    rows = doctor.capacity_rows(doctor.take_capacity(view, doctor.new_inventory()))
    assert {(r["site"], r["resource"], r["free"], r["total"], r["ready"]) for r in rows} == {
        ("origin", "nvidia.com/mig-1g.10gb", 7, 7, True),
        ("d", "-", 0, 0, False),
    }


def test_resource_flag_limits_what_counts():
    view = FakeCluster(nodes=[node("a", 2), node("b", 3, resource="amd.com/gpu")])
    rows = doctor.capacity_rows(doctor.take_capacity(view, doctor.new_inventory(["amd.com/gpu"])))
    assert [(r["resource"], r["total"]) for r in rows] == [("amd.com/gpu", 3)]


def test_storage_report_names_the_policies_the_classes_allow():
    standard = {
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path",
    }
    liqo_class = {"metadata": {"name": "liqo"}, "provisioner": liqo.STORAGE_PROVISIONER}
    nfs = {"metadata": {"name": "homes"}, "provisioner": "nfs.csi.k8s.io"}
    plain = doctor.check_storage([standard, liqo_class])
    assert plain[-1].detail == "supported here: pin-to-volume, scratch-on-donor" and plain[-1].fix
    assert any(f.subject == "class liqo" and "binds where its first server lands" in f.detail for f in plain)
    assert "cannot follow a server to a donor" in plain[0].detail
    with_nfs = doctor.check_storage([standard, nfs])
    assert with_nfs[-1].detail == "supported here: pin-to-volume, scratch-on-donor, shared"
    assert all(f.status is Status.OK for f in with_nfs)
    [unknown] = doctor.check_storage(None)
    assert unknown.status is Status.WARN
