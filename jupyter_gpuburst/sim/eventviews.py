"""Events: a recorder's core/v1 Event, and events.k8s.io/v1 as a view of the same storage (the core shape)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import ApiError, bad_request

Obj = dict[str, Any]


def events_v1_fields(selector: str | None) -> str | None:
    if not selector:
        return selector
    return selector.replace("regarding.", "involvedObject.").replace("reportingController", "reportingComponent")


def event_v1(ev: Obj) -> Obj:
    """A core/v1 Event in its events.k8s.io/v1 shape."""
    out: Obj = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": ev["metadata"],
        "eventTime": ev.get("eventTime"),
        "reportingController": ev.get("reportingComponent") or (ev.get("source") or {}).get("component", ""),
        "reportingInstance": ev.get("reportingInstance", ""),
        "action": ev.get("action", ""),
        "reason": ev.get("reason", ""),
        "regarding": ev.get("involvedObject", {}),
        "note": ev.get("message", ""),
        "type": ev.get("type", ""),
    }
    if ev.get("source"):
        out["deprecatedSource"] = ev["source"]
    for old, new in (
        ("firstTimestamp", "deprecatedFirstTimestamp"),
        ("lastTimestamp", "deprecatedLastTimestamp"),
        ("count", "deprecatedCount"),
    ):
        if ev.get(old) is not None:
            out[new] = ev[old]
    return out


def core_event(ev: Obj) -> Obj:
    """An events.k8s.io/v1 Event in its core/v1 shape (one storage for both, as in kube-apiserver)."""
    if not isinstance(ev, dict):
        raise bad_request("the body of the request is not an Event object")
    if ev.get("apiVersion") not in (None, "events.k8s.io/v1") or ev.get("kind") not in (None, "Event"):
        raise bad_request(
            f"the API version in the data ({ev.get('apiVersion')}) does not match the expected API version (events.k8s.io/v1)"
        )
    if not ev.get("eventTime"):
        raise ApiError(
            422,
            "Invalid",
            'Event.events.k8s.io "" is invalid: eventTime: Required value',
            {
                "kind": "Event",
                "group": "events.k8s.io",
                "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"}],
            },
        )
    out: Obj = {
        "metadata": ev.get("metadata") or {},
        "eventTime": ev.get("eventTime"),
        "reportingComponent": ev.get("reportingController", ""),
        "reportingInstance": ev.get("reportingInstance", ""),
        "action": ev.get("action", ""),
        "reason": ev.get("reason", ""),
        "involvedObject": ev.get("regarding") or {},
        "message": ev.get("note", ""),
        "type": ev.get("type", ""),
        "source": ev.get("deprecatedSource") or {},
        "firstTimestamp": ev.get("deprecatedFirstTimestamp"),
        "lastTimestamp": ev.get("deprecatedLastTimestamp"),
    }
    if ev.get("related"):
        out["related"] = ev["related"]
    if ev.get("deprecatedCount") is not None:
        out["count"] = ev["deprecatedCount"]
    return out


# what Liqo's event reflection appends to a donor event's source (reflection/event)
REMOTE_SUFFIX = " (remote)"


def recorded_event(
    involved: Obj,
    name: str,
    reason: str,
    message: str,
    type: str,
    component: str,
    *,
    now: datetime,
    scheduler_style: bool = False,
    host: str | None = None,
    field_path: str | None = None,
    action: str | None = None,
    remote: bool = False,
) -> Obj:
    """A core/v1 Event about ``involved``, as its recorder writes it.

    Kubelet style (default): ``source`` set, first/lastTimestamp set, ``eventTime`` null.
    Scheduler style: ``eventTime`` set, first/lastTimestamp null, ``reportingComponent``
    default-scheduler, as kube-scheduler's events.k8s.io recorder writes them.
    ``remote``: a donor's event about an offloaded pod as Liqo reflects it onto the origin's pod,
    its ``source.component`` followed by `` (remote)`` (empty before it for a scheduler's).
    """
    meta = involved.get("metadata") or {}
    ref = {
        "kind": involved.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "apiVersion": involved.get("apiVersion"),
        "resourceVersion": meta.get("resourceVersion"),
        "fieldPath": field_path,
    }
    event: Obj = {
        "metadata": {"name": name, "namespace": meta.get("namespace") or "default"},
        "involvedObject": {k: v for k, v in ref.items() if v},
        "reason": reason,
        "message": message,
        "type": type,
    }
    if scheduler_style:
        event.update(
            {
                "source": {"component": REMOTE_SUFFIX} if remote else {},
                "firstTimestamp": None,
                "lastTimestamp": None,
                "eventTime": defaults.micro_timestamp(now),
                "action": action or "Scheduling",
                "reportingComponent": component,
                "reportingInstance": f"{component}-{host or 'sim'}",
            }
        )
    else:
        stamp = defaults.timestamp(now)
        source = {"component": component + (REMOTE_SUFFIX if remote else "")}
        if host:
            source["host"] = host
        event.update(
            {
                "source": source,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "eventTime": None,
                "reportingComponent": component,
                "reportingInstance": host or "",
            }
        )
    return event
