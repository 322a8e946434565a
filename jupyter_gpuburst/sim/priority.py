"""PriorityClasses and the Priority admission plugin: a pod's ``priorityClassName`` becomes its priority.

As kube-apiserver does: the built-in classes ``system-cluster-critical`` and
``system-node-critical`` exist from the start; a user's class may not start with ``system-`` nor
go above 1000000000; at most one class is ``globalDefault``; ``value`` and ``preemptionPolicy``
cannot change. A pod without a class gets the global default's (or 0), one naming a missing
class is refused with 403 (plugin/pkg/admission/priority/admission.go: "no PriorityClass with
name %v was found"), and a pod that brings its own ``priority`` or ``preemptionPolicy`` must
agree with its class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from jupyter_gpuburst.sim.errors import forbidden, invalid

Obj = dict[str, Any]


class Store(Protocol):
    """What admission reads and writes of the object store (``sim/store.py``, which calls in here)."""

    def iter_objects(self, rtype: str) -> Iterator[Obj]: ...

    def create(self, rtype: str, obj: Obj) -> Obj: ...


GROUP = "scheduling.k8s.io"
KEY = f"priorityclasses.{GROUP}"
HIGHEST_USER_DEFINABLE = 1_000_000_000
PREEMPT_LOWER = "PreemptLowerPriority"
POLICIES = (PREEMPT_LOWER, "Never")
# kube-apiserver's bootstrap classes (pkg/apis/scheduling/types.go SystemPriorityClasses)
SYSTEM_CLASSES = (
    ("system-node-critical", 2_000_001_000, "Used for system critical pods that must not be moved from their current node."),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
)


def system_class(name: str, value: int, description: str) -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": description,
        "preemptionPolicy": PREEMPT_LOWER,
    }


def bootstrap(store: Store) -> None:
    """Create the built-in classes (the bootstrap controller's job on a new cluster)."""
    for name, value, description in SYSTEM_CLASSES:
        store.create(KEY, system_class(name, value, description))


def _known_system_class(name: str, value: Any, global_default: Any) -> bool:
    return not global_default and any(name == n and value == v for n, v, _ in SYSTEM_CLASSES)


def validate_class(store: Store, pc: Obj) -> None:
    """Default and check a new PriorityClass; 422 Invalid or 403 as kube-apiserver answers."""
    name = pc["metadata"]["name"]
    pc.setdefault("preemptionPolicy", PREEMPT_LOWER)
    causes = []
    value = pc.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        causes.append({"field": "value", "reason": "FieldValueRequired", "message": "Required value"})
    elif name.startswith("system-"):
        # apis/scheduling/validation: only the built-in classes may carry the prefix
        if not _known_system_class(name, value, pc.get("globalDefault")):
            causes.append(
                {
                    "field": "metadata.name",
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: \"{name}\": priority class names with 'system-' prefix are reserved",
                }
            )
    elif value > HIGHEST_USER_DEFINABLE:
        causes.append(
            {
                "field": "value",
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {value}: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}",
            }
        )
    if pc["preemptionPolicy"] not in POLICIES:
        causes.append(
            {
                "field": "preemptionPolicy",
                "reason": "FieldValueNotSupported",
                "message": f'Unsupported value: "{pc["preemptionPolicy"]}": supported values: "Never", "PreemptLowerPriority"',
            }
        )
    if causes:
        raise invalid("PriorityClass", name, causes, GROUP)
    if pc.get("globalDefault"):
        other = next((c for c in store.iter_objects(KEY) if c.get("globalDefault") and c["metadata"]["name"] != name), None)
        if other is not None:
            raise forbidden(
                f'priorityclasses.{GROUP} "{name}" is forbidden: PriorityClass {other["metadata"]["name"]} is already marked as default. Only one default can exist'
            )


def check_update(current: Obj, new: Obj) -> None:
    """``value`` and ``preemptionPolicy`` are immutable."""
    new.setdefault("preemptionPolicy", current.get("preemptionPolicy", PREEMPT_LOWER))
    for field in ("value", "preemptionPolicy"):
        if new.get(field) != current.get(field):
            raise invalid(
                "PriorityClass",
                current["metadata"]["name"],
                [{"field": field, "reason": "FieldValueForbidden", "message": "Forbidden: may not be changed in an update."}],
                GROUP,
            )


def admit_pod(store: Store, pod: Obj) -> None:
    """Set ``spec.priority`` (and ``preemptionPolicy``) from the pod's class, as the Priority plugin does."""
    spec = pod.setdefault("spec", {})
    name = pod.get("metadata", {}).get("name") or pod.get("metadata", {}).get("generateName") or ""
    class_name = spec.get("priorityClassName")
    if class_name:
        pc = next((c for c in store.iter_objects(KEY) if c["metadata"]["name"] == class_name), None)
        if pc is None:
            raise forbidden(f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found')
    else:
        pc = next((c for c in store.iter_objects(KEY) if c.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    priority = pc["value"] if pc else 0
    policy = (pc or {}).get("preemptionPolicy", PREEMPT_LOWER)
    if spec.get("priority") is not None and spec["priority"] != priority:
        raise forbidden(
            f'pods "{name}" is forbidden: the integer value of priority ({spec["priority"]}) must not be provided in pod spec; '
            f"priority admission controller computed {priority} from the given PriorityClass name"
        )
    if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
        raise forbidden(
            f'pods "{name}" is forbidden: the string value of PreemptionPolicy ({spec["preemptionPolicy"]}) must not be provided in pod spec; '
            f"priority admission controller computed {policy} from the given PriorityClass name"
        )
    spec["priority"] = priority
    spec["preemptionPolicy"] = policy


def priority_of(pod: Obj) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)
