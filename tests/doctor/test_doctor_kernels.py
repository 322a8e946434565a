"""`gpuburst doctor` checks what kernel mode needs of the hub's RBAC: a warning by default (the
hub runs without GPU kernels), needed with --kernels, and the fix applies rbac-kernels.yaml."""

from __future__ import annotations

from helpers.doctor import healthy

from jupyter_gpuburst import doctor
from jupyter_gpuburst.doctor import Status


def kernel_findings(report: doctor.Report) -> list[doctor.Finding]:
    return [f for f in report.findings if f.subject.endswith("(GPU kernels)")]


def test_kernel_secrets_and_adoption_are_reviewed_in_the_user_namespace():
    cluster = healthy()
    report = doctor.diagnose(cluster, "ctx", "jhub")
    for perm in doctor.KERNEL_PERMISSIONS:
        assert (perm.verb, perm.group, perm.resource, "jhub") in cluster.reviews
    # adopting a pre-started kernel patches its pod (found on the real control plane: tests/kube)
    assert ("patch", "", "pods", "jhub") in cluster.reviews
    # each origin kernel's own NetworkPolicy, which lets its server in
    assert ("create", "networking.k8s.io", "networkpolicies", "jhub") in cluster.reviews
    findings = {f.subject: f.status for f in kernel_findings(report)}
    assert findings == {
        "secrets in jhub (GPU kernels)": Status.OK,
        "pods in jhub (GPU kernels)": Status.OK,
        "networkpolicies.networking.k8s.io in jhub (GPU kernels)": Status.OK,
    }


def test_missing_kernel_permissions_warn_unless_kernels_are_in_use():
    cluster = healthy(denied={("patch", "secrets"), ("delete", "secrets")})
    report = doctor.diagnose(cluster, "ctx", "jhub")
    [finding] = [f for f in kernel_findings(report) if f.subject.startswith("secrets")]
    assert finding.status is Status.WARN and report.ok
    assert "denied patch,delete" in finding.detail and "connection key" in finding.detail
    assert finding.fix.startswith("kubectl apply -n jhub -f hub_config/rbac-kernels.yaml")
    assert "kubectl create role gpuburst-secrets -n jhub --verb=patch,delete --resource=secrets" in finding.fix
    text = doctor.render_report(report)
    assert "hub_config/rbac-kernels.yaml" in text and "All needed pieces are in place." in text
    baseline = sum(f.status is Status.WARN for f in doctor.diagnose(healthy(), "ctx", "jhub").findings)
    assert f"{baseline + 1} warning(s)" in text

    needed = doctor.diagnose(healthy(denied={("create", "secrets")}), "ctx", "jhub", kernels=True)
    [finding] = [f for f in kernel_findings(needed) if f.subject.startswith("secrets")]
    assert finding.status is Status.FAIL and not needed.ok
