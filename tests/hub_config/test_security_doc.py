"""docs/security.md explains every permission rbac.yaml grants, with the same verbs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def granted() -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for doc in yaml.safe_load_all((REPO / "hub_config" / "rbac.yaml").read_text()):
        if not doc or doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    plural = f"{resource}.{group}" if group else resource
                    rules.setdefault((doc["kind"], plural), set()).update(rule["verbs"])
    return rules


def documented() -> dict[tuple[str, str], set[str]]:
    text = (REPO / "docs" / "security.md").read_text()
    out: dict[tuple[str, str], set[str]] = {}
    kind = None
    for line in text.splitlines():
        if line.startswith("## "):
            kind = "ClusterRole" if "ClusterRole" in line else "Role" if "(Role" in line else None
        match = re.match(r"\| `([^`]+)` \| ([a-z, ]+) \|", line)
        if match and kind:
            out[(kind, match.group(1))] = {v.strip() for v in match.group(2).split(",")}
    return out


def test_every_granted_permission_is_explained_with_its_verbs():
    assert documented() == granted()


def test_readme_links_the_security_notes():
    assert "docs/security.md" in (REPO / "README.md").read_text()


def test_the_hub_may_delete_the_home_volumes_kubespawner_deletes():
    """KubeSpawner deletes a deleted user's claim by default; refused, JupyterHub only logs it."""
    from kubespawner import KubeSpawner

    from jupyter_gpuburst import doctor

    assert KubeSpawner.delete_pvc.default_value is True
    assert "delete" in granted()[("Role", "persistentvolumeclaims")]
    assert any(p.verb == "delete" and p.resource == "persistentvolumeclaims" for p in doctor.REQUIRED_PERMISSIONS)


def test_the_security_notes_say_what_z2jh_grants_and_what_ours_add():
    text = " ".join((REPO / "docs" / "security.md").read_text().split())
    # z2jh 4.4.0's hub Role (templates/hub/rbac.yaml)
    assert "| pods, persistentvolumeclaims, secrets, services | get, watch, list, create, delete |" in text
    assert "| with helm (z2jh 4.4.0) | without helm |" in text
    assert "networkpolicy-kernels.yaml" in text
