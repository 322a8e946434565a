"""The checks of `gpuburst doctor`: each piece the spawner needs, as a finding with a fix.

Both talk to the API server with the official ``kubernetes`` client, using the current
kubeconfig (or ``--kubeconfig`` / ``--context``, or the in-cluster service account when run in
the hub pod). The checks themselves only see plain dicts through the small ``ClusterView``
protocol, so they are tested with fakes and against the emulated federation alike.

What doctor checks, and why each matters to a spawn:

- Liqo is installed (its offloading API group is served): without it nothing can burst.
- Every Liqo virtual node (a donor): Ready (peering healthy), schedulable, and granting GPUs.
- Local GPU nodes: where local-first placement puts servers first.
- SelfSubjectAccessReviews for every call the spawner makes, as the identity that runs it.
- The user namespace is offloaded (a ``NamespaceOffloading`` that reaches the donors),
  otherwise the scheduler never considers a virtual node for the user's pod. Not offloaded yet
  is a warning, not a failure, when the spawner may create the offloading itself (it does so
  before the first donor spawn when ``offload_namespace`` is on and RBAC allows it).
- Storage: the cluster's storage classes, and which ``storage_policy`` each makes possible
  (Liqo's ``liqo`` class lets a home volume bind where its first server lands; a shared
  filesystem class can serve ``shared``; ``pin-to-volume`` and ``scratch-on-donor`` always work).

Exit codes: 0 when nothing needed is missing (warnings allowed), 1 when something is, 2 when the
cluster cannot be reached or the arguments are wrong.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from jupyter_gpuburst import __version__
from jupyter_gpuburst.core import keys, liqo, release
from jupyter_gpuburst.core.inventory import (
    DEFAULT_RESOURCE_NAMES,
    DEFAULT_RESOURCE_PREFIXES,
    Inventory,
    Snapshot,
    node_is_ready,
    parse_count,
)
from jupyter_gpuburst.doctor import reflection
from jupyter_gpuburst.doctor.findings import Finding, Status, selects
from jupyter_gpuburst.doctor.permissions import (
    KERNEL_PERMISSIONS,
    KERNELS_RBAC_MANIFEST,
    RBAC_MANIFEST,
    REQUIRED_PERMISSIONS,
    Permission,
    rbac_fix,
)
from jupyter_gpuburst.doctor.view import ClusterView, NotPermitted
from jupyter_gpuburst.hub.sites.storage import StoragePolicy

# KubeSpawner's component label on user servers (its component_label default)
SERVER_COMPONENT = "singleuser-server"


def _ready_message(node: Mapping[str, Any]) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            reason = condition.get("reason") or condition.get("status") or "unknown"
            message = condition.get("message")
            return f"{reason}: {message}" if message else str(reason)
    return "no Ready condition reported"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _gpus(inventory: Inventory, node: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources a node offers, counted the way the inventory counts them."""
    out: dict[str, int] = {}
    for resource, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        if inventory.tracks(resource):
            try:
                count = parse_count(value)
            except ValueError:
                continue
            if count:
                out[resource] = count
    return out


def _fmt_gpus(gpus: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {r}" for r, n in sorted(gpus.items())) or "no GPUs"


def check_liqo_installed(groups: set[str]) -> list[Finding]:
    if liqo.OFFLOADING_GROUP in groups:
        return [Finding("liqo", "Liqo API", Status.OK, f"{liqo.OFFLOADING_API_VERSION} is served")]
    return [
        Finding(
            "liqo",
            "Liqo API",
            Status.FAIL,
            f"the API group {liqo.OFFLOADING_GROUP} is not served: Liqo is not installed in this cluster",
            "liqoctl install <provider> --cluster-id <origin-name>   (see " + liqo.INSTALL_DOCS_URL + ")",
        )
    ]


def check_nodes(nodes: Iterable[Mapping[str, Any]], inventory: Inventory) -> list[Finding]:
    """Donor virtual nodes (ready, schedulable, GPUs granted) and local GPU nodes."""
    findings: list[Finding] = []
    donors = 0
    local_gpu_nodes = 0
    local_ready_gpus = 0
    for node in sorted(nodes, key=_name):
        name = _name(node)
        gpus = _gpus(inventory, node)
        if liqo.is_virtual_node(node):
            donors += 1
            cluster_id = liqo.remote_cluster_id(node) or "?"
            subject = f"donor {cluster_id} (node {name})"
            if cluster_id == "?":
                findings.append(
                    Finding(
                        "donors",
                        subject,
                        Status.FAIL,
                        "virtual node has no remote cluster id label",
                        f"kubectl describe node {shlex.quote(name)}   # re-create the peering: liqoctl unpeer/peer",
                    )
                )
            elif not node_is_ready(node):
                findings.append(
                    Finding(
                        "donors",
                        subject,
                        Status.FAIL,
                        f"NotReady ({_ready_message(node)}); {_fmt_gpus(gpus)} unusable",
                        f"liqoctl info peer {shlex.quote(cluster_id)}   # then fix the peering it reports, e.g. liqoctl peer --remote-kubeconfig <donor kubeconfig>",
                    )
                )
            elif (node.get("spec") or {}).get("unschedulable"):
                findings.append(
                    Finding(
                        "donors",
                        subject,
                        Status.WARN,
                        f"cordoned; {_fmt_gpus(gpus)} not offered to new servers",
                        f"kubectl uncordon {shlex.quote(name)}",
                    )
                )
            elif not gpus:
                findings.append(
                    Finding(
                        "donors",
                        subject,
                        Status.FAIL,
                        "Ready, but the donor grants no GPUs",
                        # the peering's own slice and virtual node carry the grant: a second slice
                        # would make a second virtual node for the same donor
                        f"liqoctl unpeer --remote-kubeconfig <{cluster_id} kubeconfig> && liqoctl peer --remote-kubeconfig "
                        f"<{cluster_id} kubeconfig> --cpu <C> --memory <M> --resource nvidia.com/gpu=<N>   # Liqo >= 1.0.2",
                    )
                )
            else:
                findings.append(Finding("donors", subject, Status.OK, f"Ready, grants {_fmt_gpus(gpus)}"))
        elif gpus:
            local_gpu_nodes += 1
            ready = node_is_ready(node)
            if ready:
                local_ready_gpus += sum(gpus.values())
            findings.append(
                Finding(
                    "origin",
                    f"node {name}",
                    Status.OK if ready else Status.WARN,
                    f"{'Ready' if ready else 'NotReady (' + _ready_message(node) + ')'}, {_fmt_gpus(gpus)}",
                    None if ready else f"kubectl describe node {shlex.quote(name)}",
                )
            )
    if donors == 0:
        findings.append(
            Finding(
                "donors",
                "virtual nodes",
                Status.FAIL,
                "no Liqo virtual node: no donor cluster is peered",
                "liqoctl peer --remote-kubeconfig <donor kubeconfig>   # run against the origin cluster",
            )
        )
    if local_gpu_nodes == 0:
        findings.append(
            Finding(
                "origin",
                "GPU nodes",
                Status.WARN,
                "no local node advertises a GPU resource: every GPU server goes to a donor",
                "install the NVIDIA device plugin or GPU operator on the origin's GPU nodes",
            )
        )
    return findings


def check_permissions(
    view: ClusterView,
    namespace: str,
    permissions: Iterable[Permission] = REQUIRED_PERMISSIONS,
    manifest: str = RBAC_MANIFEST,
    denied_status: Status = Status.FAIL,
    label: str = "",
) -> list[Finding]:
    """One SelfSubjectAccessReview per needed verb, reported as one line per resource and scope.

    Every denied verb shares one fix that grants exactly what is missing (or applies ``manifest``).
    ``denied_status``: WARN for what only an optional feature needs; ``label`` names that feature.
    """
    rules: dict[tuple[bool, str, str], list[tuple[Permission, bool, str]]] = {}
    missing: list[Permission] = []
    for perm in permissions:
        allowed, reason = view.access_review(perm.verb, perm.group, perm.resource, namespace if perm.namespaced else None)
        rules.setdefault((not perm.namespaced, perm.group, perm.resource), []).append((perm, allowed, reason))
        if not allowed:
            missing.append(perm)
    fix = rbac_fix(missing, namespace, manifest=manifest) if missing else None
    findings: list[Finding] = []
    for answers in rules.values():
        first = answers[0][0]
        qualified = f"{first.resource}.{first.group}" if first.group else first.resource
        subject = f"{qualified} {'in ' + namespace if first.namespaced else 'cluster-wide'}" + (f" ({label})" if label else "")
        verbs = ",".join(p.verb for p, _, _ in answers)
        denied = [(p.verb, reason) for p, ok, reason in answers if not ok]
        if not denied:
            findings.append(Finding("rbac", subject, Status.OK, f"{verbs}: {first.why}"))
            continue
        reasons = sorted({r for _, r in denied if r})
        detail = f"denied {','.join(v for v, _ in denied)} (needed to {first.why})" + (f": {'; '.join(reasons)}" if reasons else "")
        findings.append(Finding("rbac", subject, denied_status, detail, fix))
    return findings


def check_offloading(
    offloading: Mapping[str, Any] | None, namespace: str, donor_nodes: Iterable[Mapping[str, Any]], spawner_offloads: bool = False
) -> list[Finding]:
    """The user namespace must be offloaded, to the donors, with local pods still allowed.

    ``spawner_offloads``: the hub may create the NamespaceOffloading itself, so a namespace not
    offloaded yet is a warning (the first donor spawn offloads it), not a failure.
    """
    subject = f"namespace {namespace}"
    ns = shlex.quote(namespace)
    offload_fix = (
        f"liqoctl offload namespace {ns} --pod-offloading-strategy LocalAndRemote   "
        f"# or: kubectl create -f - <<< '{json.dumps(liqo.namespace_offloading(namespace))}'"
    )
    if offloading is None and spawner_offloads:
        return [
            Finding(
                "offloading",
                subject,
                Status.WARN,
                "not offloaded yet: the spawner creates the NamespaceOffloading before the first donor spawn "
                "(offloading it now lets you choose donors with a clusterSelector)",
                offload_fix,
            )
        ]
    if offloading is None:
        return [
            Finding(
                "offloading",
                subject,
                Status.FAIL,
                f"not offloaded (no NamespaceOffloading {liqo.NAMESPACE_OFFLOADING_NAME!r}): user pods can never reach a donor",
                offload_fix,
            )
        ]
    spec = offloading.get("spec") or {}
    status = offloading.get("status") or {}
    findings: list[Finding] = []
    strategy = spec.get("podOffloadingStrategy", "LocalAndRemote")
    if strategy != "LocalAndRemote":
        where = "the origin's own GPUs" if strategy == "Remote" else "donors"
        findings.append(
            Finding(
                "offloading",
                subject,
                Status.WARN,
                f"podOffloadingStrategy is {strategy}: pods cannot use {where}",
                f"liqoctl unoffload namespace {ns} && {offload_fix}",
            )
        )
    phase = status.get("offloadingPhase")
    if phase in (None, "", "Ready"):
        findings.append(Finding("offloading", subject, Status.OK, f"offloaded ({strategy}{', phase ' + phase if phase else ''})"))
    elif phase == "InProgress":
        findings.append(
            Finding("offloading", subject, Status.WARN, "offloading in progress", f"kubectl get namespaceoffloading -n {ns} -w")
        )
    else:
        findings.append(
            Finding(
                "offloading",
                subject,
                Status.FAIL,
                f"offloading phase {phase}",
                f"kubectl describe namespaceoffloading {liqo.NAMESPACE_OFFLOADING_NAME} -n {ns}",
            )
        )
    if strategy != "Local":
        selector = spec.get("clusterSelector")
        for node in donor_nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not selects(selector, labels):
                cid = liqo.remote_cluster_id(node)
                findings.append(
                    Finding(
                        "offloading",
                        f"{subject} -> donor {cid}",
                        Status.WARN,
                        "the NamespaceOffloading clusterSelector leaves this donor out",
                        f"kubectl edit namespaceoffloading {liqo.NAMESPACE_OFFLOADING_NAME} -n {ns}   # widen spec.clusterSelector",
                    )
                )
    return findings


# Provisioners of filesystems every site can reach over the network: candidates for 'shared'.
SHARED_FS_PROVISIONER_WORDS = ("nfs", "cephfs", "efs", "filestore", "file.csi.azure", "azurefile", "lustre", "beegfs", "juicefs")


def check_build(version: str) -> Finding:
    """Which build this doctor is: a release, or a development build (``0.3.0.dev0``, or a local
    version such as ``0.2.0+g1a2b3c``), whose pods' labels name no published release."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return Finding("versions", "this doctor", Status.WARN, f"version {version!r}: not built from a release (no version it knows)")
    if parsed.is_devrelease or parsed.local is not None:
        return Finding("versions", "this doctor", Status.OK, f"development build {version}, not a release")
    return Finding("versions", "this doctor", Status.OK, f"release {version}")


def check_versions(pods: Iterable[Mapping[str, Any]], namespace: str, version: str) -> list[Finding]:
    """Servers and GPU kernels in ``namespace`` made by another release than ``version`` (doctor's
    own: run in the hub pod, the hub's). Hub, user and kernel images must match; a pod of an older
    release keeps its image until its server restarts."""
    ours = release.label_value(version)
    by_version: dict[str, list[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") != namespace:
            continue
        ours_kind = labels.get(keys.COMPONENT_LABEL) in (SERVER_COMPONENT, keys.KERNEL_COMPONENT)
        if keys.VERSION_LABEL not in labels and not ours_kind:
            continue
        # pods from before the label existed are servers and kernels of 0.1.0
        by_version.setdefault(labels.get(keys.VERSION_LABEL, "0.1.0"), []).append(_name(pod))
    others = {v: names for v, names in by_version.items() if v != ours}
    if not others:
        count = len(by_version.get(ours, []))
        return [Finding("versions", f"servers and kernels in {namespace}", Status.OK, f"{count} pod(s), all of release {ours}")]
    findings = []
    for other, names in sorted(others.items()):
        shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        findings.append(
            Finding("versions", f"servers and kernels in {namespace}", Status.WARN,
                    f"{len(names)} pod(s) of release {other}, not {ours} (this doctor's and the hub's after an upgrade): {shown}",
                    "restart those servers (the hub's admin page: stop, then the student starts again); "
                    "their GPU kernels go with them")
        )  # fmt: skip
    return findings


def check_storage(classes: list[Mapping[str, Any]] | None) -> list[Finding]:
    """Which storage policies (``c.GPUBurstSpawner.storage_policy``) the cluster supports."""
    if classes is None:
        return [
            Finding(
                "storage",
                "storage classes",
                Status.WARN,
                "this identity may not list storage classes; storage policy support not checked",
                "run doctor as a cluster admin (without --as) to see them",
            )
        ]
    policies = [StoragePolicy.PIN_TO_VOLUME.value, StoragePolicy.SCRATCH_ON_DONOR.value]
    findings = []
    default = next(
        (
            c
            for c in classes
            if ((c.get("metadata") or {}).get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
        ),
        None,
    )
    names = {(c.get("metadata") or {}).get("name"): c for c in classes}
    if default is not None:
        findings.append(
            Finding(
                "storage",
                f"class {default['metadata']['name']} (default)",
                Status.OK,
                "home volumes of this class are bound on the origin and cannot follow a server to a donor: "
                "pin-to-volume keeps those servers on the origin, scratch-on-donor gives them scratch space on donors",
            )
        )
    if liqo.VIRTUAL_STORAGE_CLASS in names:
        findings.append(
            Finding(
                "storage",
                f"class {liqo.VIRTUAL_STORAGE_CLASS}",
                Status.OK,
                "Liqo's storage class: a home volume of this class binds where its first server lands "
                "(origin or donor) and pin-to-volume keeps later servers there",
            )
        )
    shared = [n for n, c in names.items() if any(w in str(c.get("provisioner", "")).lower() for w in SHARED_FS_PROVISIONER_WORDS)]
    for name in shared:
        findings.append(
            Finding(
                "storage",
                f"class {name}",
                Status.OK,
                f"a network filesystem ({names[name].get('provisioner')}): 'shared' works if donors reach it "
                "over Liqo's network and mount the same claim",
            )
        )
    if shared:
        policies.append(StoragePolicy.SHARED.value)
    findings.append(
        Finding(
            "storage",
            "storage policies",
            Status.OK,
            f"supported here: {', '.join(policies)}",
            None if shared else "for 'shared', provision a network filesystem (e.g. NFS) that donors reach",
        )
    )
    return findings


@dataclass
class Report:
    context: str
    namespace: str
    findings: list[Finding] = field(default_factory=list)
    capacity: Snapshot | None = None

    @property
    def ok(self) -> bool:
        return all(f.status is not Status.FAIL for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "context": self.context,
            "namespace": self.namespace,
            "findings": [f.as_dict() for f in self.findings],
            "capacity": self.capacity.as_dict() if self.capacity is not None else None,
        }


def new_inventory(resources: Sequence[str] | None = None) -> Inventory:
    if resources:
        return Inventory(resource_names=resources, resource_prefixes=())
    return Inventory(DEFAULT_RESOURCE_NAMES, DEFAULT_RESOURCE_PREFIXES)


def take_capacity(view: ClusterView, inventory: Inventory, nodes: list[dict[str, Any]] | None = None) -> Snapshot:
    for node in nodes if nodes is not None else view.list_nodes():
        inventory.apply_node_event("ADDED", node)
    for pod in view.list_pods():
        inventory.apply_pod_event("ADDED", pod)
    return inventory.snapshot()


def diagnose(
    view: ClusterView,
    context: str,
    namespace: str,
    resources: Sequence[str] | None = None,
    kernels: bool = False,
    hub_namespace: str | None = None,
) -> Report:
    """Run every check; never raises for a missing piece, only for an unreachable cluster.

    ``kernels``: GPU kernels are in use, so their permissions are needed (FAIL when missing);
    otherwise a missing one is a warning that kernel mode would not work. ``hub_namespace``:
    where the hub runs, whose Secrets must not be reflected (unknown: said, not checked).
    """
    report = Report(context=context, namespace=namespace)
    inventory = new_inventory(resources)
    report.findings += check_liqo_installed(view.api_groups())
    permissions = check_permissions(view, namespace)
    try:
        nodes = view.list_nodes()
    except NotPermitted as exc:
        # the permission lines below say what is missing; what depends on the nodes waits for it
        nodes = None
        report.findings.append(_not_checked("nodes", "GPU nodes and donors", exc))
    else:
        report.findings += check_nodes(nodes, inventory)
    report.findings += permissions
    report.findings += check_permissions(
        view, namespace, KERNEL_PERMISSIONS, KERNELS_RBAC_MANIFEST, Status.FAIL if kernels else Status.WARN, "GPU kernels"
    )
    if liqo.OFFLOADING_GROUP in view.api_groups() and nodes is not None:
        donors = [n for n in nodes if liqo.is_virtual_node(n)]
        # get and create are checked together; both allowed means the spawner offloads itself
        may_offload = any(f.status is Status.OK and f.subject.startswith(f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.") for f in permissions)
        try:
            offloading = view.namespace_offloading(namespace)
        except NotPermitted as exc:
            report.findings.append(_not_checked("offloading", f"namespace {namespace}", exc))
        else:
            report.findings += check_offloading(offloading, namespace, donors, may_offload)
        report.findings += _reflection_findings(view, namespace, hub_namespace, donors)
    try:
        classes = view.list_storage_classes()
    except NotPermitted:
        classes = None  # the hub needs none: a warning with its own fix, not a missing permission
    report.findings += check_storage(classes)
    report.findings.append(check_build(_own_version()))
    try:
        report.findings += check_versions(view.list_pods(), namespace, _own_version())
    except NotPermitted as exc:
        report.findings.append(_not_checked("versions", f"servers and kernels in {namespace}", exc))
    if nodes is not None:
        try:
            report.capacity = take_capacity(view, inventory, nodes)
        except NotPermitted as exc:
            report.findings.append(_not_checked("capacity", "free GPUs per site", exc))
    return report


def _reflection_findings(view: ClusterView, namespace: str, hub_namespace: str | None, donors: list[dict[str, Any]]) -> list[Finding]:
    try:
        hub_offloading = view.namespace_offloading(hub_namespace) if hub_namespace else None
    except NotPermitted as exc:
        findings = [_not_checked("reflection", f"hub namespace {hub_namespace}", exc)]
    else:
        findings = reflection.check_hub_namespace(hub_namespace, namespace, hub_offloading)
    try:
        kernel_spaces = [reflection.donor_kernel_namespace(namespace, liqo.remote_cluster_id(d) or "") for d in donors]
        offloadings = {ns: view.namespace_offloading(ns) for ns in kernel_spaces}
    except NotPermitted as exc:
        findings.append(_not_checked("reflection", "the donors' kernel namespaces", exc))
    except ValueError:
        pass  # a name too long for a namespace: the hub refuses such kernels with that reason
    else:
        findings += reflection.check_donor_kernel_namespaces(namespace, donors, offloadings)
    try:
        templates = view.vk_options_templates()
    except NotPermitted:
        templates = None  # the hub needs no such read: a warning with its own fix
    return findings + reflection.check_secret_reflection(templates)


def _own_version() -> str:
    return __version__


def _not_checked(area: str, subject: str, why: NotPermitted) -> Finding:
    # no fix of its own: the permission line for the same read carries it
    return Finding(area, subject, Status.WARN, f"not checked: {why} (see the permissions below)")
