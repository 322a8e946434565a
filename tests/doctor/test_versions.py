"""doctor warns about servers and GPU kernels that another release made (after an upgrade)."""

from __future__ import annotations

import json

import pytest

from jupyter_gpuburst import __version__, doctor
from jupyter_gpuburst.core import keys, release
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests


def pod(name: str, labels: dict[str, str], namespace: str = "jhub") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


SERVER = {"component": "singleuser-server"}


def test_pods_of_this_release_are_ok():
    kernel_labels = manifests.kernel_labels(Placement("origin", None, "gpu-0", "nvidia.com/gpu", 1, "r"))
    pods = [pod("jupyter-ann", {**SERVER, keys.VERSION_LABEL: release.label_value(__version__)}), pod("gpuburst-kernel-a-1", kernel_labels)]
    [finding] = doctor.check_versions(pods, "jhub", kernel_labels[keys.VERSION_LABEL])
    assert finding.status is doctor.Status.OK and "2 pod(s)" in finding.detail


def test_older_pods_are_named_with_their_release_and_the_fix():
    pods = [
        pod("jupyter-ann", {**SERVER, keys.VERSION_LABEL: "0.2.0"}),
        pod("jupyter-bob", {**SERVER, keys.VERSION_LABEL: "0.3.0"}),
        # made before pods carried the label: 0.1.0
        pod("jupyter-cy", SERVER),
        pod("gpuburst-kernel-x-1", {"component": keys.KERNEL_COMPONENT}),
        # not ours, or not in the hub's namespace: not counted
        pod("hub-123", {"component": "hub"}),
        pod("jupyter-dee", SERVER, namespace="research"),
    ]
    findings = doctor.check_versions(pods, "jhub", "0.3.0")
    assert [f.status for f in findings] == [doctor.Status.WARN, doctor.Status.WARN]
    assert "2 pod(s) of release 0.1.0" in findings[0].detail and "gpuburst-kernel-x-1, jupyter-cy" in findings[0].detail
    assert "release 0.2.0" in findings[1].detail and "jupyter-ann" in findings[1].detail
    assert all("restart" in f.fix for f in findings)


def test_a_local_version_is_a_valid_label_value():
    assert release.label_value("0.2.0+g1a2b3c.d20261127") == "0.2.0-g1a2b3c.d20261127"
    assert release.label_value("0.2.0") == "0.2.0"


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("0.2.0", "release 0.2.0"),
        ("0.3.0.dev0", "development build 0.3.0.dev0, not a release"),
        ("0.2.0+g1a2b3c.d20261127", "development build 0.2.0+g1a2b3c.d20261127, not a release"),
    ],
)
def test_doctor_prints_whether_it_is_a_release_or_a_development_build(monkeypatch, version, says):
    from helpers.doctor import healthy

    from jupyter_gpuburst.doctor import checks

    monkeypatch.setattr(checks, "_own_version", lambda: version)
    printed = doctor.render_report(doctor.diagnose(healthy(), "ctx", "jhub"))
    [line] = [row for row in printed.splitlines() if "this doctor" in row]
    assert line.split("this doctor", 1)[1].strip() == says


def test_this_checkout_is_a_development_build_until_it_is_released():
    # the changelog's newest section is what the version says: dated for a release, else unreleased
    from pathlib import Path

    from packaging.version import Version

    repo = Path(__file__).resolve().parents[2]
    changelog = (repo / "CHANGELOG.md").read_text()
    # the version every build takes (pyproject.toml), as Python writes it
    version = str(Version(json.loads((repo / "labextension" / "package.json").read_text())["version"]))
    newest = next(line for line in changelog.splitlines() if line.startswith("## ["))
    if newest.endswith("- Unreleased"):
        assert newest == f"## [{Version(version).base_version}] - Unreleased"
        assert doctor.check_build(version).detail == f"development build {version}, not a release"
    else:
        assert doctor.check_build(version).detail == f"release {version}"
