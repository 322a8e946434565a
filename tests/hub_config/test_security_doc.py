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
