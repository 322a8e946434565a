"""What a GPU kernel's pod says of itself, as the hub's pod cache keeps it (no I/O)."""

from __future__ import annotations

import json
from typing import Any

from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.kernels.settings import CHANNELS


def pod_ports(pod: dict[str, Any]) -> dict[str, int]:
    """The kernel's five ports as its pod's annotation says; empty when it says none."""
    annotation = ((pod.get("metadata") or {}).get("annotations") or {}).get(manifests.PORTS_ANNOTATION, "")
    try:
        said = json.loads(annotation)
    except ValueError:
        return {}
    ports = {f"{channel}_port": said.get(f"{channel}_port") for channel in CHANNELS} if isinstance(said, dict) else {}
    return ports if ports and all(type(port) is int for port in ports.values()) else {}


def ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def exit_message(pod: dict[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated:
            return f"exit code {terminated.get('exitCode')}"
    return (pod.get("status") or {}).get("phase") or "unknown"


def where(placement: Placement) -> str:
    return f"donor {placement.site}" if placement.is_donor else f"the origin (node {placement.node})" if placement.node else "the origin"
