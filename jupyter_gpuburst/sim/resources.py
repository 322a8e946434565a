"""The resource types the emulator serves: names, scope and verbs as kube-apiserver reports them.

Liqo's kinds mirror its CRDs (the YAML files in the reference liqo-crds folder); a test checks them against the CRD
files so a Liqo rename cannot slip past.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# Fields every kind can be selected on.
COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class ResourceType:
    """One served resource type (one REST collection)."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    subresources: tuple[str, ...] = ()
    singular: str = ""
    categories: tuple[str, ...] = ()
    # Field selector labels beyond metadata.name / metadata.namespace.
    field_labels: tuple[str, ...] = field(default=())
    # A CRD's additionalPrinterColumns: (name, type, priority, jsonPath).
    printer_columns: tuple[tuple[str, str, int, str], ...] = ()

    @property
    def key(self) -> str:
        """Registry key: ``pods`` for core, ``<plural>.<group>`` otherwise."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def selectable_fields(self) -> tuple[str, ...]:
        return COMMON_FIELDS + self.field_labels


_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

_TYPES = [
    ResourceType(
        "",
        "v1",
        "Namespace",
        "namespaces",
        False,
        ("ns",),
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        ("status",),
        "namespace",
        (),
        ("status.phase",),
    ),
    ResourceType("", "v1", "Node", "nodes", False, ("no",), STANDARD_VERBS, ("status",), "node", (), ("spec.unschedulable",)),
    ResourceType(
        "",
        "v1",
        "Pod",
        "pods",
        True,
        ("po",),
        STANDARD_VERBS,
        ("status", "binding", "log", "exec"),
        "pod",
        ("all",),
        (
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    ResourceType("", "v1", "Event", "events", True, ("ev",), STANDARD_VERBS, (), "event", (), _EVENT_FIELDS),
    ResourceType(
        "",
        "v1",
        "Service",
        "services",
        True,
        ("svc",),
        ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        ("status",),
        "service",
        ("all",),
    ),
    ResourceType(
        "", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), STANDARD_VERBS, ("status",), "persistentvolumeclaim"
    ),
    ResourceType("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), STANDARD_VERBS, ("status",), "persistentvolume"),
    ResourceType("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",), STANDARD_VERBS, (), "storageclass"),
    ResourceType("", "v1", "Secret", "secrets", True, (), STANDARD_VERBS, (), "secret", (), ("type",)),
    ResourceType("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",), STANDARD_VERBS, (), "serviceaccount"),
    ResourceType("", "v1", "ConfigMap", "configmaps", True, ("cm",), STANDARD_VERBS, (), "configmap"),
    ResourceType(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        True,
        ("ev",),
        ("create", "get", "list", "watch"),
        (),
        "event",
        (),
        ("reason", "reportingController", "type", "regarding.kind", "regarding.name", "regarding.namespace", "regarding.uid"),
    ),
    # the endpoints of Services without a selector (the hub's own address in the user namespace,
    # hub/address): pods' hosts files name them (kubelet/servicenames.py), and Liqo reflects them
    ResourceType("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True, (), STANDARD_VERBS, (), "endpointslice"),
    # stored, not enforced (the process kubelet has no pod network to filter): the hub gives each GPU kernel one
    ResourceType("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, ("netpol",), STANDARD_VERBS, (), "networkpolicy"),
    ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",), STANDARD_VERBS, (), "priorityclass"),
    # an admin's RBAC manifests apply as on a cluster; sim/rbac.py authorizes impersonated requests by them
    ResourceType("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, (), STANDARD_VERBS, (), "clusterrole"),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, (), STANDARD_VERBS, (), "clusterrolebinding"
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "Role", "roles", True, (), STANDARD_VERBS, (), "role"),
    ResourceType("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, (), STANDARD_VERBS, (), "rolebinding"),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        False,
        (),
        ("create",),
        (),
        "selfsubjectaccessreview",
    ),
    ResourceType(
        liqo.OFFLOADING_GROUP,
        liqo.OFFLOADING_VERSION,
        liqo.NAMESPACE_OFFLOADING_KIND,
        liqo.NAMESPACE_OFFLOADING_PLURAL,
        True,
        ("nso", "nsof", "nsoff", "nsoffloading"),
        STANDARD_VERBS,
        ("status",),
        "namespaceoffloading",
        ("liqo",),
        printer_columns=(
            ("NamespaceMappingStrategy", "string", 0, ".spec.namespaceMappingStrategy"),
            ("PodOffloadingStrategy", "string", 0, ".spec.podOffloadingStrategy"),
            ("OffloadingPhase", "string", 0, ".status.offloadingPhase"),
            ("RemoteNamespaceName", "string", 10, ".status.remoteNamespaceName"),
            ("Age", "date", 0, ".metadata.creationTimestamp"),
        ),
    ),
    ResourceType(
        liqo.OFFLOADING_GROUP,
        liqo.OFFLOADING_VERSION,
        liqo.VIRTUAL_NODE_KIND,
        liqo.VIRTUAL_NODE_PLURAL,
        True,
        ("vn", "vnode", "virno", "vno"),
        STANDARD_VERBS,
        ("status",),
        "virtualnode",
        ("liqo",),
        printer_columns=(
            ("ClusterID", "string", 0, ".spec.clusterID"),
            ("Create Node", "boolean", 0, ".spec.createNode"),
            ("Age", "date", 0, ".metadata.creationTimestamp"),
            ("Node", "string", 1, '.status.conditions[?(@.type=="Node")].status'),
            ("VirtualKubelet", "string", 1, '.status.conditions[?(@.type=="VirtualKubelet")].status'),
        ),
    ),
]

RESOURCES: dict[str, ResourceType] = {t.key: t for t in _TYPES}

# events.k8s.io/v1 Events are a view of the core Events (one storage), served read-only.
EVENTS_V1_KEY = "events.events.k8s.io"
# Resources that are not stored (create answers at once).
VIRTUAL_RESOURCES = frozenset({"selfsubjectaccessreviews.authorization.k8s.io"})


def resource(key: str) -> ResourceType:
    """The served type for ``key``; ``ApiError`` 404 when the server does not serve it."""
    try:
        return RESOURCES[key]
    except KeyError:
        raise ApiError(404, "NotFound", "the server could not find the requested resource") from None


def by_path(group: str, version: str, plural: str) -> ResourceType:
    """The type behind ``/api[s]/{group}/{version}/{plural}``."""
    key = f"{plural}.{group}" if group else plural
    rtype = RESOURCES.get(key)
    if rtype is None or rtype.version != version:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return rtype


def group_versions() -> dict[str, list[str]]:
    """``{group: [versions]}`` for every served group, core ("") included."""
    out: dict[str, list[str]] = {}
    for t in _TYPES:
        versions = out.setdefault(t.group, [])
        if t.version not in versions:
            versions.append(t.version)
    return out
