"""A GPU kernel as the hub knows it (its record), and the errors a start or stop answers with."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.capacity.tracker import kernel_key
from jupyter_gpuburst.hub.kernels.podstate import pod_ports, ready
from jupyter_gpuburst.hub.kernels.queued import Line
from jupyter_gpuburst.hub.kernels.settings import KernelProfile


class KernelError(Exception):
    """A request the hub refuses; ``message`` is meant for the notebook user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Refused(KernelError):
    """A start the hub's policy refuses (a used-up GPU-hour budget), not a failure."""

    def __init__(self, message: str) -> None:
        super().__init__(403, message)


@dataclass
class KernelRecord:
    id: str
    user: str
    server_name: str
    kernel_id: str
    profile: KernelProfile
    namespace: str
    pod_name: str = ""
    state: str = "pending"  # pending -> running -> stopped, or failed
    placement: Placement | None = None
    error: str = ""
    files: str = "scratch"
    relocated_from: str = ""
    groups: frozenset[str] = frozenset()
    ports: dict[str, int] = field(default_factory=dict)  # its pod's five, as the pod spec names them
    attempts: list[dict[str, str]] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    # when the start was asked for (monotonic): a wait in the queue counts against start_timeout
    accepted: float = field(default_factory=time.monotonic)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # counts the changes notify() announced: a long-poll that names the version its caller read
    # returns at once when one came in between, which ``changed`` alone cannot tell it
    version: int = 0
    task: asyncio.Task | None = None
    # while it waits in the hub's queue for a GPU: its place and the expected wait
    line: Line | None = None
    prestarted: bool = False  # its pod is a pre-started kernel it adopted (hub/kernels/prestarted)
    claim: dict[str, Any] | None = None  # the waiting kernel held for it until it is placed

    @property
    def key(self) -> str:
        return kernel_key(self.user, self.id)

    def notify(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()


def record_from_pod(
    pod: dict[str, Any], record_id: str, profiles: dict[str, KernelProfile], inventory: Any, default_ports: dict[str, int]
) -> KernelRecord:
    """The record of a kernel pod this process did not start (a hub restart), from its labels and annotations."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    profile = profiles.get(annotations.get(keys.PROFILE_ANNOTATION, ""))
    requests = inventory.pod_requests(pod)
    resource, count = next(iter(sorted(requests.items())), ("", 0))
    if profile is None:
        profile = KernelProfile(slug="unknown", display_name="GPU kernel", resource=resource, count=count)
    placement = Placement(
        site=labels.get(keys.SITE_LABEL, ""),
        cluster_id=labels.get(keys.CLUSTER_LABEL),
        node=(pod.get("spec") or {}).get("nodeName"),
        resource=resource,
        count=count,
        reason=annotations.get(keys.REASON_ANNOTATION, ""),
    )
    return KernelRecord(
        id=record_id,
        user=annotations.get(keys.USER_ANNOTATION, ""),
        server_name=annotations.get(keys.SERVER_ANNOTATION, ""),
        kernel_id=annotations.get(keys.JUPYTER_KERNEL_ANNOTATION, ""),
        profile=profile,
        namespace=meta.get("namespace", ""),
        pod_name=meta.get("name", ""),
        state="running" if ready(pod) else "pending",
        placement=placement,
        files=annotations.get(keys.FILES_ANNOTATION, "scratch"),
        # pods of a hub from before the annotation listen on the first set
        ports=pod_ports(pod) or default_ports,
        prestarted=bool(annotations.get(keys.PRESTARTED_ANNOTATION)),
    )
