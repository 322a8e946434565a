"""Defaulting and validation on create, the subset of kube-apiserver's that clients rely on.

Pods get what the API server and its default admission plugins add (scheduler name, grace
period, service account, requests defaulted from limits, default tolerations, QoS class, phase
Pending); Services get a cluster IP; Namespaces their finalizer and phase. Validation covers names
and the required fields whose absence would break the scheduler or the kubelet.
"""

from __future__ import annotations

import base64
import itertools
import re
from datetime import datetime, timezone
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jupyter_gpuburst.sim.errors import invalid

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Compute resources that decide the QoS class (extended resources do not).
_QOS_RESOURCES = ("cpu", "memory")
_DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)


def timestamp(when: datetime) -> str:
    """metav1.Time: RFC 3339, second precision, UTC."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(stamp: str | None) -> datetime | None:
    """The moment a metav1.Time (or MicroTime, read to the second) names, UTC; None for none."""
    if not stamp:
        return None
    return datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)


def micro_timestamp(when: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def validate_name(kind: str, name: str, namespaced_kind_is_label: bool = False, group: str = "") -> None:
    """422 for a name kube-apiserver would refuse."""
    pattern = _DNS1123_LABEL if namespaced_kind_is_label else _DNS1123_SUBDOMAIN
    if len(name) > (63 if namespaced_kind_is_label else 253) or not pattern.match(name):
        what = "RFC 1123 label" if namespaced_kind_is_label else "lowercase RFC 1123 subdomain"
        raise invalid(
            kind,
            name,
            [
                {
                    "field": "metadata.name",
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: \"{name}\": a {what} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                }
            ],
            group,
        )


def validate_persistent_volume(pv: dict[str, Any]) -> None:
    """A CSI volume's driver name, as kube-apiserver checks it: a DNS subdomain of at most 63."""
    driver = ((pv.get("spec") or {}).get("csi") or {}).get("driver")
    if driver is None or (len(driver) <= 63 and _DNS1123_SUBDOMAIN.match(driver)):
        return
    message = (
        f'Invalid value: "{driver}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '
        "'-' or '.', and must start and end with an alphanumeric character"
    )
    raise invalid(
        "PersistentVolume", pv["metadata"]["name"], [{"field": "spec.csi.driver", "reason": "FieldValueInvalid", "message": message}]
    )


def validate_pod(pod: dict[str, Any]) -> None:
    """The required fields of a Pod spec."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec")
    causes = []
    containers = (spec or {}).get("containers") if isinstance(spec, dict) else None
    if not containers:
        causes.append({"field": "spec.containers", "reason": "FieldValueRequired", "message": "Required value"})
    else:
        seen = set()
        for i, c in enumerate(containers):
            if not c.get("name"):
                causes.append({"field": f"spec.containers[{i}].name", "reason": "FieldValueRequired", "message": "Required value"})
            elif c["name"] in seen:
                causes.append(
                    {"field": f"spec.containers[{i}].name", "reason": "FieldValueDuplicate", "message": f'Duplicate value: "{c["name"]}"'}
                )
            seen.add(c.get("name"))
            if not c.get("image"):
                causes.append({"field": f"spec.containers[{i}].image", "reason": "FieldValueRequired", "message": "Required value"})
            for kind in ("requests", "limits"):
                for res, qty in ((c.get("resources") or {}).get(kind) or {}).items():
                    try:
                        parse_quantity(qty)
                    except (ValueError, TypeError, ArithmeticError):
                        causes.append(
                            {
                                "field": f"spec.containers[{i}].resources.{kind}[{res}]",
                                "reason": "FieldValueInvalid",
                                "message": f"Invalid value: \"{qty}\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                            }
                        )
    if causes:
        raise invalid("Pod", name, causes)


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("imagePullPolicy", _image_pull_policy(c.get("image", "")))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    resources = c.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for res, qty in limits.items():
            requests.setdefault(res, qty)
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def _stringify(mapping: Any) -> Any:
    if isinstance(mapping, dict):
        return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in mapping.items()}
    return mapping


def normalize_quantities(obj: dict[str, Any]) -> None:
    """Quantities are strings on the wire, whatever number a client sent (``1`` -> ``"1"``)."""
    kind = obj.get("kind")
    if kind == "Pod":
        spec = obj.get("spec") or {}
        for c in itertools.chain(spec.get("containers") or [], spec.get("initContainers") or []):
            resources = c.get("resources")
            if isinstance(resources, dict):
                for key in ("requests", "limits"):
                    if key in resources:
                        resources[key] = _stringify(resources[key])
    elif kind == "Node":
        status = obj.get("status") or {}
        for key in ("capacity", "allocatable"):
            if key in status:
                status[key] = _stringify(status[key])
    elif kind == "PersistentVolumeClaim":
        resources = (obj.get("spec") or {}).get("resources") or {}
        for key in ("requests", "limits"):
            if key in resources:
                resources[key] = _stringify(resources[key])


def qos_class(pod: dict[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort from cpu and memory requests and limits."""
    containers = pod["spec"].get("containers", []) + pod["spec"].get("initContainers", [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for name in _QOS_RESOURCES:
            if name in req or name in lim:
                any_set = True
            if name not in lim or name not in req or parse_quantity(req[name]) != parse_quantity(lim[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: dict[str, Any]) -> None:
    """Apply the API server's Pod defaults in place (after validation)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect", default["effect"]) == default["effect"] for t in tolerations):
            tolerations.append(dict(default))
    for c in itertools.chain(spec.get("containers", []), spec.get("initContainers", [])):
        _default_container(c)
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status["qosClass"] = qos_class(pod)


def default_namespace(ns: dict[str, Any]) -> None:
    name = ns["metadata"]["name"]
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}


def default_service(svc: dict[str, Any], cluster_ip: str) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        spec.setdefault("clusterIP", cluster_ip)
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    svc.setdefault("status", {"loadBalancer": {}})


def default_pvc(pvc: dict[str, Any]) -> None:
    pvc.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
    pvc.setdefault("status", {}).setdefault("phase", "Pending")


def default_secret(secret: dict[str, Any]) -> None:
    secret.setdefault("type", "Opaque")
    fold_string_data(secret)


def fold_string_data(secret: dict[str, Any]) -> None:
    """``stringData`` is write-only: each value is base64-encoded into ``data`` (winning over a
    ``data`` entry of the same key) and the field is never stored, as kube-apiserver does."""
    string_data = secret.pop("stringData", None)
    if not string_data:
        return
    data = secret.setdefault("data", {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()


def default_node(node: dict[str, Any]) -> None:
    labels = node["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/hostname", node["metadata"]["name"])
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    labels.setdefault("beta.kubernetes.io/os", "linux")
    labels.setdefault("beta.kubernetes.io/arch", "amd64")
