"""`gpuburst doctor --json` against the configured cluster: it runs and its report is well formed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.realcluster

GPUBURST = Path(sys.executable).parent / "gpuburst"
STATUSES = {"ok", "warn", "fail"}
# A guard against a hang, not a speed check. doctor is CPU-bound: about 3 CPU seconds (most of
# them importing the kubernetes client), 3 s of wall time on an idle 2-core machine, 12-15 s at a
# load of 8 there, and over 60 s beside the three tiers of `make test` (the realcluster tier's
# doctor was killed at 60 s by the earlier limit).
DOCTOR_TIMEOUT_S = 180


def run_doctor(real_cluster, namespace: str) -> tuple[int, dict, str]:
    argv = [
        str(GPUBURST),
        "doctor",
        "--json",
        "--kubeconfig",
        str(real_cluster.kubeconfig),
        "-n",
        namespace,
        "--resource",
        real_cluster.gpu_resource,
    ]
    if real_cluster.context:
        argv += ["--context", real_cluster.context]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=DOCTOR_TIMEOUT_S)
    assert proc.returncode in (0, 1), f"doctor could not check the cluster (exit {proc.returncode}): {proc.stderr}"
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_doctor_reports_every_check_with_fixes_for_failures(real_cluster, test_namespace):
    rc, report, _ = run_doctor(real_cluster, test_namespace)
    assert set(report) >= {"ok", "context", "namespace", "findings", "capacity"}
    assert report["namespace"] == test_namespace
    if real_cluster.context:
        assert report["context"] == real_cluster.context
    findings = report["findings"]
    for finding in findings:
        assert set(finding) == {"area", "subject", "status", "detail", "fix"}, finding
        assert finding["status"] in STATUSES, finding
        assert finding["area"] and finding["subject"] and finding["detail"], finding
        if finding["status"] == "fail":
            assert isinstance(finding["fix"], str) and finding["fix"].strip(), f"a failure without a fix: {finding}"
    failed = [f for f in findings if f["status"] == "fail"]
    assert report["ok"] is (not failed)
    assert rc == (0 if report["ok"] else 1)
    areas = {f["area"] for f in findings}
    # every run checks Liqo, the donors and the hub's permissions, whatever the outcome
    assert {"liqo", "donors", "rbac"} <= areas, areas


def test_doctor_sees_liqo_and_a_peered_donor(real_cluster, test_namespace):
    """What holds on any Liqo-peered origin: the offloading API is served and a donor exists."""
    _, report, _ = run_doctor(real_cluster, test_namespace)
    liqo_findings = [f for f in report["findings"] if f["area"] == "liqo"]
    assert liqo_findings and all(f["status"] == "ok" for f in liqo_findings), liqo_findings
    donors = [f for f in report["findings"] if f["area"] == "donors" and f["subject"] != "virtual nodes"]
    assert donors, f"no donor virtual node reported: {report['findings']}"
    sites = report["capacity"]["sites"]
    assert any(s["kind"] == "donor" and s["cluster_id"] for s in sites), sites
    for site in sites:
        for resource, counts in site["resources"].items():
            assert 0 <= counts["free"] <= counts["allocatable"], (site, resource)
