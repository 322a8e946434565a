"""Which ``FailedScheduling`` events about a donor pod are the donor's own refusal.

A pod placed on a donor is first scheduled by the origin onto the donor's virtual node. When
that takes a preemption (a warm pool's placeholders hold the room), kube-scheduler writes the
pod's ``nominatedNodeName`` and ``PodScheduled=False`` in one status update and reports the
same refusal ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, ...") as a
``FailedScheduling`` event, which its event broadcaster sends on its own time. The victims go
at once (grace period 0) and the pod is bound a tenth of a second later, so the event often
reaches the hub after the pod is bound, when no nomination is left to say what it was about:
read as the donor's refusal, it moved a spawn that was already on its way.

The origin's refusals come before the origin's ``Scheduled`` event about the pod (one
scheduler, one broadcaster, in order); the donor's come after it, since the donor only sees
the pod once it is bound. So only events read after a ``Scheduled`` about this pod count;
the origin's own refusal of an unbound pod is read from its condition
(``unschedulable_reason``). Should the ``Scheduled`` event never arrive (events are best
effort), the donor's refusal still moves the pod after ``donor_pending_grace_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuburst.hub.sites.unschedulable import failed_scheduling_reason

SCHEDULED = "Scheduled"


class DonorRefusals:
    """Reads one pod's events in the order they arrived; forget() starts a new pod."""

    def __init__(self) -> None:
        self._bound_uid: str | None = None  # the pod whose Scheduled event was read

    def forget(self) -> None:
        self._bound_uid = None

    def reason(self, fresh: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], uid: str | None, resource: str) -> str | None:
        """The donor's shortage message among ``fresh`` (events not read before), or None."""
        if uid is None:
            return None
        if self._bound_uid != uid:
            self._bound_uid = None
        after: list[Mapping[str, Any]] = []
        for event in fresh:
            if self._bound_uid is not None:
                after.append(event)
            elif event.get("reason") == SCHEDULED and _about(event, uid):
                self._bound_uid = uid
        return failed_scheduling_reason(after, pod, uid, resource) if after else None


def _about(event: Mapping[str, Any], uid: str) -> bool:
    return (event.get("involvedObject") or {}).get("uid") == uid
