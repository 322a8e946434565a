"""What the hub's identity must be allowed to do, one API call at a time, and the kubectl
commands that grant what is missing (`gpuburst doctor` checks each with an access review)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from jupyter_gpuburst.core import liqo


@dataclass(frozen=True)
class Permission:
    """One API call the hub makes, checked with a SelfSubjectAccessReview."""

    verb: str
    resource: str
    group: str = ""
    namespaced: bool = True
    why: str = ""


def _perms(verbs: str, resource: str, group: str = "", namespaced: bool = True, why: str = "") -> list[Permission]:
    return [Permission(v, resource, group, namespaced, why) for v in verbs.split(",")]


# Everything GPUBurstSpawner (KubeSpawner underneath) and its capacity watch call; the same list
# is what hub_config/rbac.yaml grants, and a test holds the two together. Each ``why`` completes
# "needed to ..." in the report.
REQUIRED_PERMISSIONS: tuple[Permission, ...] = tuple(
    _perms("list,watch", "nodes", namespaced=False, why="count GPUs on local nodes and Liqo virtual nodes")
    + _perms("list,watch", "pods", namespaced=False, why="count the GPUs pods of every namespace hold")
    + _perms("get,list,watch,create,delete", "pods", why="start, watch and stop user servers")
    + _perms("list,watch", "events", why="show spawn progress and see Unschedulable pods")
    + _perms(
        "get,create,delete",
        "persistentvolumeclaims",
        why="create home volumes, see where they are bound, and delete a deleted user's",
    )
    + _perms(
        "get,create",
        liqo.NAMESPACE_OFFLOADING_PLURAL,
        liqo.OFFLOADING_GROUP,
        why="offload the user namespace to donors, the first time a pod goes to one",
    )
    + _perms("get,create,update", "services", why="keep the Service 'hub' by which servers on every site reach the hub")
    + _perms("get,create,update", "endpointslices", "discovery.k8s.io", why="point the Service 'hub' at the hub pod's IP")
)

# Kernel mode (remote GPU kernels) adds these, granted by the opt-in hub_config/rbac-kernels.yaml
# (a test holds the two together). Without them GPU kernels cannot start; servers still can.
KERNEL_PERMISSIONS: tuple[Permission, ...] = tuple(
    _perms("create,patch,delete", "secrets", why="keep each GPU kernel's connection key in a Secret owned by its pod")
    + _perms("patch", "pods", why="adopt a pre-started GPU kernel (warm pools): its pod becomes the adopter's")
    + _perms(
        "create",
        "networkpolicies",
        "networking.k8s.io",
        why="let only its own server into each GPU kernel (a NetworkPolicy owned by the kernel's pod)",
    )
)
RBAC_MANIFEST = "hub_config/rbac.yaml"
KERNELS_RBAC_MANIFEST = "hub_config/rbac-kernels.yaml"


def rbac_fix(missing: Iterable[Permission], namespace: str, service_account: str = "hub", manifest: str = RBAC_MANIFEST) -> str:
    """kubectl commands granting exactly the missing permissions (or apply ``manifest``)."""
    by_rule: dict[tuple[bool, str, str], list[str]] = {}
    for perm in missing:
        by_rule.setdefault((perm.namespaced, perm.group, perm.resource), []).append(perm.verb)
    ns = shlex.quote(namespace)
    lines = [f"kubectl apply -n {ns} -f {manifest}   # or grant just what is missing:"]
    for (namespaced, group, resource), verbs in sorted(by_rule.items()):
        qualified = f"{resource}.{group}" if group else resource
        role = f"gpuburst-{resource.replace('.', '-')}"
        if namespaced:
            lines.append(f"kubectl create role {role} -n {ns} --verb={','.join(verbs)} --resource={qualified}")
            lines.append(f"kubectl create rolebinding {role} -n {ns} --role={role} --serviceaccount={ns}:{service_account}")
        else:
            lines.append(f"kubectl create clusterrole {role}-all --verb={','.join(verbs)} --resource={qualified}")
            lines.append(f"kubectl create clusterrolebinding {role}-all --clusterrole={role}-all --serviceaccount={ns}:{service_account}")
    return "\n".join(lines)
