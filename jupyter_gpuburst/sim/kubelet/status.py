"""Pod status from the containers' states, by the kubelet's rules (``getPhase``, conditions)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim.kubelet import netns

Obj = dict[str, Any]


@dataclass
class ContainerRun:
    """What the kubelet knows of one container of a running pod."""

    spec: Obj
    init: bool
    pod_dir: Path
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    ran: bool = False  # has had a process (containerID, imageID are set from then on)
    process: Any = None  # asyncio.subprocess.Process while running
    kill_reason: str | None = None  # "liveness"/"startup" while the kubelet kills it for a probe
    view: Any = None  # volumes.PathMap of the current instance
    backoff: float = 0.0  # seconds to wait before the next restart

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def done_ok(self) -> bool:
        term = self.state.get("terminated")
        return bool(term) and term.get("exitCode") == 0

    def log_path(self, previous: bool = False) -> Path:
        # one file per container instance, in the pod's directory (no directory per container:
        # every mkdir counts when forty pods start at once)
        return self.pod_dir / f"{self.name}.{self.restart_count - (1 if previous else 0)}.log"

    def status(self, uid: str) -> Obj:
        image = self.spec.get("image", "")
        out: Obj = {
            "name": self.name,
            "image": image,
            "imageID": f"sim://{image}" if self.ran else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.ran:
            out["containerID"] = f"sim://{uid}-{self.name}-{self.restart_count}"
        return out


def pod_phase(policy: str, init: list[ContainerRun], main: list[ContainerRun]) -> str:
    """kubelet's getPhase, for init and regular containers."""
    for c in init:
        if c.done_ok:
            continue
        term = c.state.get("terminated")
        if term and policy == "Never":
            return "Failed"
        return "Pending"
    running = stopped = succeeded = waiting = 0
    for c in main:
        if "running" in c.state:
            running += 1
        elif "terminated" in c.state:
            stopped += 1
            succeeded += c.state["terminated"].get("exitCode") == 0
        elif c.last_state.get("terminated"):
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def conditions(old: list[Obj], phase: str, init: list[ContainerRun], main: list[ContainerRun], sandbox: bool, stamp: str) -> list[Obj]:
    previous = {c["type"]: c for c in old or []}

    def cond(ctype: str, ok: bool, reason: str | None = None, message: str | None = None) -> Obj:
        status = "True" if ok else "False"
        prev = previous.get(ctype)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == status else stamp
        c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if reason:
            c["reason"] = reason
        if message:
            c["message"] = message
        return c

    pending_init = [c.name for c in init if not c.done_ok]
    unready = [c.name for c in main if not c.ready]
    initialized = not pending_init
    ready = initialized and not unready
    if phase == "Succeeded":
        not_ready_reason, message = "PodCompleted", None
    else:
        not_ready_reason, message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]" if unready else None
    out = [
        cond("PodReadyToStartContainers", sandbox and phase in ("Pending", "Running")),
        cond(
            "Initialized",
            initialized,
            None if initialized else "ContainersNotInitialized",
            None if initialized else f"containers with incomplete status: [{' '.join(pending_init)}]",
        ),
        cond("Ready", ready, None if ready else not_ready_reason, None if ready else message),
        cond("ContainersReady", ready, None if ready else not_ready_reason, None if ready else message),
    ]
    out.append(previous.get("PodScheduled") or cond("PodScheduled", True))
    if "DisruptionTarget" in previous:  # the scheduler's (preemption) or the eviction API's, not ours to drop
        out.append(previous["DisruptionTarget"])
    if init and initialized and phase == "Succeeded":
        out[1]["reason"] = "PodCompleted"
    return out


@dataclass
class PodRun:
    """What the kubelet knows of one running pod."""

    key: tuple[str, str]
    uid: str
    ip: str
    dir: Path
    pod: Obj
    init: list[ContainerRun]
    main: list[ContainerRun]
    hostname: str
    volumes: dict[str, Path] = field(default_factory=dict)
    hosts_file: Path | None = None
    real_mounts: bool = False  # volumes bound at their mountPath (mounts.real_mounts), else mapped
    network: netns.PodNetwork | None = None  # a network namespace of its own, else the host's
    tasks: list[asyncio.Task] = field(default_factory=list)
    killing: bool = False
    sandbox: bool = False  # the pod IP is assigned and published
    killed: asyncio.Event = field(default_factory=asyncio.Event)

    def all(self) -> list[ContainerRun]:
        return [*self.init, *self.main]

    def container(self, name: str | None) -> ContainerRun | None:
        for c in self.all():
            if name is None and not c.init:
                return c
            if c.name == name:
                return c
        return None
