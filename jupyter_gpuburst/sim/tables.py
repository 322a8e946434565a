"""``meta.k8s.io/v1`` Table rendering, the server-side printing ``kubectl get`` relies on.

Columns and cell wording follow kube-apiserver's printers (pkg/printers/internalversion):
priority-1 columns are the ones ``-o wide`` adds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from jupyter_gpuburst.sim.defaults import parse_timestamp
from jupyter_gpuburst.sim.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description

_NAME = ("Name", "string", 0, "Name must be unique within a namespace.")
_AGE = ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was created.")


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 192:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    return f"{h // 24 // 365}y{h // 24 % 365}d"


def _age(ts: str | None, now: datetime) -> str:
    when = parse_timestamp(ts)
    return "<unknown>" if when is None else human_duration((now - when).total_seconds())


def _pod_cells(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        state = c.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            term = state["terminated"]
            reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}")
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts,
        _age(pod["metadata"].get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_cells(node: Obj, now: datetime) -> list[Any]:
    status, spec = node.get("status") or {}, node.get("spec") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        state,
        ",".join(sorted(set(roles))) or "<none>",
        _age(node["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _event_cells(ev: Obj, now: datetime) -> list[Any]:
    last = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    inv = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    src = source.get("component") or ev.get("reportingComponent") or ""
    if source.get("host"):
        src = f"{src}, {source['host']}"
    return [
        _age(last, now),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}",
        inv.get("fieldPath", ""),
        src,
        (ev.get("message") or "").strip(),
        _age(first, now),
        ev.get("count", 1),
        ev["metadata"]["name"],
    ]


def _namespace_cells(ns: Obj, now: datetime) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""), _age(ns["metadata"].get("creationTimestamp"), now)]


def _service_cells(svc: Obj, now: datetime) -> list[Any]:
    spec = svc.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP", "<none>"),
        "<none>",
        ports,
        _age(svc["metadata"].get("creationTimestamp"), now),
        selector,
    ]


def _priority_class_cells(pc: Obj, now: datetime) -> list[Any]:
    return [
        pc["metadata"]["name"],
        pc.get("value", 0),
        bool(pc.get("globalDefault")),
        _age(pc["metadata"].get("creationTimestamp"), now),
        pc.get("preemptionPolicy", ""),
    ]


def _default_cells(obj: Obj, now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj["metadata"].get("creationTimestamp"), now)]


_PRINTERS: dict[str, tuple[list[Column], Callable[[Obj, datetime], list[Any]]]] = {
    "pods": (
        [
            _NAME,
            ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            ("Restarts", "string", 0, "The number of times the containers in this pod have been restarted."),
            _AGE,
            ("IP", "string", 1, "IP address allocated to the pod."),
            ("Node", "string", 1, "Name of the node this pod runs on."),
            ("Nominated Node", "string", 1, "Name of the node where the pod is nominated to run."),
            ("Readiness Gates", "string", 1, "Pod readiness gates."),
        ],
        _pod_cells,
    ),
    "nodes": (
        [
            _NAME,
            ("Status", "string", 0, "The status of the node"),
            ("Roles", "string", 0, "The roles of the node"),
            _AGE,
            ("Version", "string", 0, "Kubelet Version reported by the node."),
            ("Internal-IP", "string", 1, "List of internal IPs of the node."),
            ("External-IP", "string", 1, "List of external IPs of the node."),
            ("OS-Image", "string", 1, "OS Image reported by the node."),
            ("Kernel-Version", "string", 1, "Kernel Version reported by the node."),
            ("Container-Runtime", "string", 1, "Container Runtime Version reported by the node."),
        ],
        _node_cells,
    ),
    "events": (
        [
            ("Last Seen", "string", 0, "Time when last event occurred"),
            ("Type", "string", 0, "Type of this event"),
            ("Reason", "string", 0, "Reason why this event was generated"),
            ("Object", "string", 0, "The object that this event is about"),
            ("Subobject", "string", 1, "The subobject that this event is about"),
            ("Source", "string", 1, "The source of this event"),
            ("Message", "string", 0, "A human-readable description of this event"),
            ("First Seen", "string", 1, "Time when first event occurred"),
            ("Count", "string", 1, "The number of times this event has occurred"),
            ("Name", "string", 1, "The name of this event"),
        ],
        _event_cells,
    ),
    "namespaces": ([_NAME, ("Status", "string", 0, "The status of the namespace"), _AGE], _namespace_cells),
    # kube-apiserver's printer for scheduling.k8s.io PriorityClasses (kubectl get pc)
    "priorityclasses.scheduling.k8s.io": (
        [
            _NAME,
            ("Value", "integer", 0, "Value is the integer value of this priority class."),
            (
                "Global-Default",
                "boolean",
                0,
                "GlobalDefault specifies whether this PriorityClass should be considered as the default priority.",
            ),
            _AGE,
            ("PreemptionPolicy", "string", 0, "PreemptionPolicy is the Policy for preempting pods with lower priority."),
        ],
        _priority_class_cells,
    ),
    "services": (
        [
            _NAME,
            ("Type", "string", 0, "Type of the service."),
            ("Cluster-IP", "string", 0, "Cluster IP address of the service."),
            ("External-IP", "string", 0, "External IP addresses of the service."),
            ("Port(s)", "string", 0, "Ports exposed by the service."),
            _AGE,
            ("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
        ],
        _service_cells,
    ),
}


_FILTER = re.compile(r'^\[\?\(@\.([A-Za-z0-9_]+)==["\']([^"\']*)["\']\)\]')
_STEP = re.compile(r"^\.([A-Za-z0-9_-]+)")


def json_path(obj: Any, path: str) -> Any:
    """The subset of JSONPath CRD printer columns use: ``.a.b`` and ``[?(@.k=="v")]`` filters."""
    current: list[Any] = [obj]
    rest = path.strip()
    while rest:
        if m := _STEP.match(rest):
            current = [c.get(m.group(1)) for c in current if isinstance(c, dict) and m.group(1) in c]
        elif m := _FILTER.match(rest):
            current = [e for c in current if isinstance(c, list) for e in c if isinstance(e, dict) and str(e.get(m.group(1))) == m.group(2)]
        else:
            raise ValueError(f"unsupported JSONPath {path!r} at {rest!r}")
        rest = rest[m.end() :]
    return current[0] if current else None


def _crd_printer(rtype: ResourceType) -> tuple[list[Column], Callable[[Obj, datetime], list[Any]]]:
    columns: list[Column] = [_NAME] + [(name, kind, prio, "") for name, kind, prio, _ in rtype.printer_columns]

    def cells(obj: Obj, now: datetime) -> list[Any]:
        row: list[Any] = [obj["metadata"]["name"]]
        for _name, kind, _prio, path in rtype.printer_columns:
            value = json_path(obj, path)
            if kind == "date":
                value = _age(value, now) if value else "<unknown>"
            row.append(value)
        return row

    return columns, cells


def _columns(rtype: ResourceType) -> tuple[list[Column], Callable[[Obj, datetime], list[Any]]]:
    if rtype.printer_columns:
        return _crd_printer(rtype)
    return _PRINTERS.get(rtype.key, ([_NAME, _AGE], _default_cells))


def _row_object(obj: Obj, include_object: str) -> Obj | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(rtype: ResourceType, objects: list[Obj], resource_version: str, *, include_object: str = "Metadata", headers: bool = True) -> Obj:
    """A Table of ``objects`` (one row each); ``headers=False`` leaves out the column definitions."""
    columns, cells = _columns(rtype)
    now = datetime.now(timezone.utc)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj, now)}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": d, "priority": p} for n, t, p, d in columns
        ]
        if headers
        else [],
        "rows": rows,
    }
