"""A finding of `gpuburst doctor` (what was checked, how it went, the fix), shared by its checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from jupyter_gpuburst.core.nodeselector import selector_matches


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Finding:
    """One line of the report: what was checked, how it went, and how to fix it if needed."""

    area: str
    subject: str
    status: Status
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        return out


def selects(cluster_selector: Mapping[str, Any] | None, node_labels: Mapping[str, str]) -> bool:
    """Whether a NamespaceOffloading clusterSelector admits a virtual node (no selector: all)."""
    terms = (cluster_selector or {}).get("nodeSelectorTerms") or []
    return not terms or selector_matches(cluster_selector, node_labels)
