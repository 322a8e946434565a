"""The install guide (docs/install.md) as commands, so tests run and check exactly what it says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from jupyter_gpuburst.sim.rbac import RBAC_GROUP
from jupyter_gpuburst.sim.store import Store

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
INSTALL = REPO / "docs" / "install.md"
KERNELS = REPO / "docs" / "kernels.md"
RBAC_MANIFEST = REPO / "hub_config" / "rbac.yaml"


def guide_commands() -> list[str]:
    """Every command line of the install guide's bash blocks (continuations joined, comments dropped)."""
    guide = INSTALL.read_text()
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", guide, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line:
                lines.append(line)
    return lines


def command(prefix: str) -> list[str]:
    """The one guide command that starts with ``prefix``, split as the shell would."""
    [line] = [line for line in guide_commands() if line.startswith(prefix)]
    return shlex.split(line)


def apply_rbac_manifest(store: Store, namespace: str) -> None:
    """Step 3's `kubectl apply -f hub_config/rbac.yaml`, straight into an emulator's ``Store``:
    its roles and bindings as the API server stores them, the namespaced ones in ``namespace``
    (the file's user namespace replaced, as an admin whose namespace differs does)."""
    for doc in yaml.safe_load_all(RBAC_MANIFEST.read_text()):
        if doc:
            namespaced = doc["kind"] in ("Role", "RoleBinding")
            if namespaced:
                doc["metadata"]["namespace"] = namespace
            store.create(f"{doc['kind'].lower()}s.{RBAC_GROUP}", doc, namespace if namespaced else None)
