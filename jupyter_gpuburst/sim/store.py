"""In-memory object store with Kubernetes semantics: one per emulated cluster.

One global ``resource_version`` counter (like an etcd revision) is bumped by every write. Every
write is an event in a bounded history ring, so a watch can resume from any version the ring
still holds; an older one gets 410 Expired. The store runs on one asyncio loop and has no locks:
every method except iterating a :class:`Watch` is synchronous, so a write handler never blocks.

Objects are kept as plain dicts in their API shape. A stored dict is never mutated after it is
stored (writes replace it), and callers always receive deep copies.

Writes, the history ring and the opening of watches share one resource-version counter and
live here together; an open watch's filtering is ``watch.Watch``'s, an Event's shape is
``eventviews``'.
"""

from __future__ import annotations

import copy
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from jupyter_gpuburst.sim import defaults, eventviews, paging, podsecurity, priority
from jupyter_gpuburst.sim.errors import ApiError, already_exists, bad_request, conflict, forbidden, gone, invalid, not_found
from jupyter_gpuburst.sim.resources import RESOURCES, VIRTUAL_RESOURCES, ResourceType, resource
from jupyter_gpuburst.sim.selectors import matcher, select
from jupyter_gpuburst.sim.watch import Watch

Obj = dict[str, Any]
# Namespaces that exist in every fresh cluster.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
TERMINAL_PHASES = ("Succeeded", "Failed")
# Event timestamps that the API keeps as explicit nulls; clients sort on them.
_EVENT_NULLABLE = ("firstTimestamp", "lastTimestamp", "eventTime")
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _prune_nulls(value: Any) -> Any:
    """Drop None values recursively, like Go's ``omitempty`` on what clients send."""
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


class Store:
    """All objects of one cluster, with watch history. See the module docstring."""

    def __init__(self, *, history_size: int = 2000, clock: Callable[[], float] = time.time):
        self.resource_version: int = 0
        self._clock = clock
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {key: {} for key in RESOURCES}
        self._watchers: dict[str, set[Watch]] = {key: set() for key in RESOURCES}
        # (rv, rtype key, event type, object, previous object)
        self._history: deque[tuple[int, str, str, Obj, Obj | None]] = deque(maxlen=history_size)
        self._compacted = 0  # highest version evicted from the history ring
        self._orphaning: set[str] = set()  # uids whose dependents are kept on removal
        self._next_cluster_ip = 10
        for ns in INITIAL_NAMESPACES:
            self.create("namespaces", {"metadata": {"name": ns}})
        priority.bootstrap(self)

    # ---- helpers -----------------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), tz=timezone.utc)

    def _rt(self, rtype: str | ResourceType) -> ResourceType:
        rt = rtype if isinstance(rtype, ResourceType) else resource(rtype)
        if rt.key in VIRTUAL_RESOURCES or rt.key not in self._objects:
            raise ApiError(405, "MethodNotAllowed", f"{rt.plural} are not stored")
        return rt

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if rt.namespaced else "", name)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._objects[rt.key].get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        return obj

    def _commit(self, rt: ResourceType, etype: str, obj: Obj, old: Obj | None) -> Obj:
        """Bump the version, store ``obj`` (unless DELETED), record and fan out the event."""
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        key = self._key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if etype == "DELETED":
            self._objects[rt.key].pop(key, None)
        else:
            self._objects[rt.key][key] = obj
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0][0]
        self._history.append((self.resource_version, rt.key, etype, obj, old))
        for w in list(self._watchers[rt.key]):
            w._offer(etype, obj, old)
        return obj

    def iter_objects(self, rtype: str) -> Iterator[Obj]:
        """Stored objects of a type, read-only and without copying (for in-process controllers)."""
        return iter(list(self._objects[self._rt(rtype).key].values()))

    # ---- reads -------------------------------------------------------------------------------

    def exists(self, rtype: str, namespace: str | None, name: str) -> bool:
        rt = self._rt(rtype)
        return self._key(rt, namespace, name) in self._objects[rt.key]

    def get(self, rtype: str, namespace: str | None, name: str) -> Obj:
        """A deep copy of the object; ``ApiError`` 404 when absent."""
        return copy.deepcopy(self._current(self._rt(rtype), namespace, name))

    def list(
        self, rtype: str, namespace: str | None = None, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        """Matching objects sorted by namespace/name, and the current resourceVersion."""
        rt = self._rt(rtype)
        return select(self._objects[rt.key], rt, namespace, label_selector, field_selector), str(self.resource_version)

    def list_page(
        self,
        rtype: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
        continue_token: str | None,
    ) -> tuple[list[Obj], str, str | None, int | None]:
        """One chunk of a paged list: (items, resourceVersion, continue token, remainingItemCount).

        Like kube-apiserver, the token carries the version of the first chunk and the key after
        which to go on; later chunks report that version. Only the present is kept here, so a
        later chunk shows the objects as they are now; a token older than the watch history
        gets 410 Expired, as a token older than etcd's compaction does.
        """
        rt = self._rt(rtype)
        match = matcher(label_selector, field_selector, rt.selectable_fields)
        list_rv, start = self.resource_version, ""
        if continue_token:
            list_rv, start = paging.decode_continue(continue_token)
            if list_rv < self._compacted:
                raise paging.expired(paging.encode_continue(self.resource_version, start))
        keys = sorted(k for k in self._objects[rt.key] if (namespace is None or not rt.namespaced or k[0] == namespace))
        out: list[Obj] = []
        last = ""
        token: str | None = None
        remaining: int | None = None
        for i, key in enumerate(keys):
            if start and paging.key_string(key) < start:
                continue
            obj = self._objects[rt.key][key]
            if not match(obj):
                continue
            if limit and len(out) >= limit:
                token = paging.encode_continue(list_rv, last + "\x00")
                if not label_selector and not field_selector:
                    remaining = len(keys) - i  # as kube-apiserver: only counted without selectors
                break
            out.append(copy.deepcopy(obj))
            last = paging.key_string(key)
        return out, str(list_rv), token, remaining

    # ---- writes ------------------------------------------------------------------------------

    def create(self, rtype: str, obj: Obj, namespace: str | None = None, *, dry_run: bool = False) -> Obj:
        """Create ``obj`` with server defaults; 409 AlreadyExists, 404 for a missing namespace.

        ``dry_run``: validate and default, return the result, store nothing.
        """
        rt = self._rt(rtype)
        if not isinstance(obj, dict):
            raise bad_request(f"the body of the request is not a {rt.kind} object")
        nullable = _EVENT_NULLABLE if rt.kind == "Event" else ()
        obj = {k: (copy.deepcopy(v) if k in nullable else _prune_nulls(v)) for k, v in obj.items() if v is not None or k in nullable}
        self._check_type(rt, obj)
        obj = {"kind": obj.pop("kind"), "apiVersion": obj.pop("apiVersion"), **obj}
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["generateName"] + "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
        if not name:
            raise invalid(
                rt.kind,
                "",
                [{"field": "metadata.name", "reason": "FieldValueRequired", "message": "Required value: name or generateName is required"}],
                rt.group,
            )
        defaults.validate_name(rt.kind, name, rt.kind == "Namespace", rt.group)
        meta["name"] = name
        if rt.namespaced:
            ns = self._namespace_for(rt, meta, namespace)
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
            ns = ""
        if self._key(rt, ns, name) in self._objects[rt.key]:
            raise already_exists(rt.plural, name, rt.group)
        for server_owned in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_owned, None)
        if "status" in rt.subresources and rt.kind != "Node":
            # Status is the server's to set (nodes register with theirs, as kubelets do).
            obj.pop("status", None)
        if rt.key == priority.KEY:
            priority.validate_class(self, obj)
        elif rt.kind == "Pod":
            priority.admit_pod(self, obj)  # the Priority admission plugin, before validation as in kube-apiserver
        self._apply_defaults(rt, obj)
        if rt.kind == "Pod":
            podsecurity.admit_pod(self._objects["namespaces"].get(("", ns)), obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = defaults.timestamp(self.now())
        if rt.kind not in ("Event", "Secret", "ConfigMap", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
            meta["generation"] = 1
        if dry_run:
            return obj
        self._commit(rt, "ADDED", obj, None)
        return copy.deepcopy(obj)

    def _check_type(self, rt: ResourceType, obj: Obj) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
                if api_version != rt.api_version
                else f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version

    def _namespace_for(self, rt: ResourceType, meta: Obj, namespace: str | None) -> str:
        given = meta.get("namespace")
        if namespace and given and given != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        ns = namespace or given or "default"
        ns_obj = self._objects["namespaces"].get(("", ns))
        if ns_obj is None:
            raise not_found("namespaces", ns)
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise forbidden(
                f'{rt.plural} "{meta.get("name", "")}" is forbidden: unable to create new content in namespace {ns} because it is being terminated'
            )
        return ns

    def _apply_defaults(self, rt: ResourceType, obj: Obj) -> None:
        if rt.group:
            return
        defaults.normalize_quantities(obj)
        if rt.kind == "Pod":
            defaults.validate_pod(obj)
            defaults.default_pod(obj)
        elif rt.kind == "PersistentVolume":
            defaults.validate_persistent_volume(obj)
        elif rt.kind == "Namespace":
            defaults.default_namespace(obj)
        elif rt.kind == "Service":
            ip = f"10.96.{self._next_cluster_ip // 250}.{self._next_cluster_ip % 250 + 1}"
            self._next_cluster_ip += 1
            defaults.default_service(obj, ip)
        elif rt.kind == "PersistentVolumeClaim":
            defaults.default_pvc(obj)
        elif rt.kind == "Secret":
            defaults.default_secret(obj)
        elif rt.kind == "Node":
            defaults.default_node(obj)

    def replace(self, rtype: str, obj: Obj, subresource: str | None = None, *, dry_run: bool = False) -> Obj:
        """PUT semantics: 409 Conflict on a stale ``metadata.resourceVersion`` when one is given.

        Without ``subresource`` the status of a type with a status subresource is kept; with
        ``subresource="status"`` only the status changes (as kube-apiserver's strategies do).
        ``dry_run``: check and return the result, store nothing.
        """
        rt = self._rt(rtype)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            raise bad_request("name is required in metadata")
        meta = obj["metadata"]
        current = self._current(rt, meta.get("namespace"), meta["name"])
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != current["metadata"]["namespace"]:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        given_rv = meta.get("resourceVersion")
        if given_rv and str(given_rv) != current["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, meta["name"], rt.group)
        new = _prune_nulls(copy.deepcopy(obj)) if rt.kind != "Event" else copy.deepcopy(obj)
        self._check_type(rt, new)
        if subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(current)
            if status is not None:
                new["status"] = status
        else:
            new_meta = new["metadata"]
            for kept in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "generation"):
                if kept in current["metadata"]:
                    new_meta[kept] = current["metadata"][kept]
                else:
                    new_meta.pop(kept, None)
            if "status" in rt.subresources:
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            if rt.kind == "Pod":
                defaults.validate_pod(new)
            elif rt.key == priority.KEY:
                priority.check_update(current, new)
            elif rt.kind == "Secret":
                defaults.fold_string_data(new)
        if dry_run:
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return new
        return self._update(rt, current, new)

    def _update(self, rt: ResourceType, current: Obj, new: Obj) -> Obj:
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        defaults.normalize_quantities(new)
        if new == current:  # a no-op write bumps nothing and sends no event
            return copy.deepcopy(current)
        if "generation" in current["metadata"] and new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = current["metadata"]["generation"] + 1
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and rt.kind not in ("Pod", "Namespace"):
            self._commit(rt, "DELETED", new, current)
            self._after_removal(rt, new)
            return copy.deepcopy(new)
        self._commit(rt, "MODIFIED", new, current)
        return copy.deepcopy(new)

    def mutate(self, rtype: str, namespace: str | None, name: str, fn: Callable[[Obj], Any]) -> Obj:
        """For in-process controllers: ``fn`` edits a copy in place; at most one MODIFIED event.

        Nothing is protected (status, spec.nodeName, metadata): controllers write what they own.
        """
        rt = self._rt(rtype)
        current = self._current(rt, namespace, name)
        new = copy.deepcopy(current)
        fn(new)
        for kept in ("uid", "name", "namespace", "creationTimestamp"):
            if kept in current["metadata"]:
                new["metadata"][kept] = current["metadata"][kept]
        return self._update(rt, current, new)

    def delete(
        self,
        rtype: str,
        namespace: str | None,
        name: str,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        """Delete with kube-apiserver's rules; returns the object as last stored.

        ``preconditions`` (DeleteOptions'): a ``uid`` or ``resourceVersion`` the object no
        longer has is 409 Conflict and deletes nothing, so a deleter acting on what it read
        before cannot remove an object replaced or changed since.

        Pods: the grace period comes from the argument, else ``spec.terminationGracePeriodSeconds``.
        Zero, an unscheduled pod or a terminal one goes at once (DELETED); otherwise
        ``deletionTimestamp``/``deletionGracePeriodSeconds`` are set (MODIFIED) and whoever runs
        the pod calls :meth:`remove` when it is gone. Objects with finalizers wait for them.
        Dependents (ownerReferences) go when the owner is removed, unless the policy is Orphan.
        """
        rt = self._rt(rtype)
        if propagation_policy not in (None, "Background", "Foreground", "Orphan"):
            raise bad_request(f'Unsupported propagation policy "{propagation_policy}"')
        current = self._current(rt, namespace, name)
        meta = current["metadata"]
        _check_preconditions(rt, meta, preconditions)
        if propagation_policy == "Orphan":
            self._orphaning.add(meta["uid"])
        if rt.kind == "Pod":
            return self._delete_pod(rt, current, grace_period_seconds)
        if rt.kind == "Namespace":
            return self._delete_namespace(rt, current)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = defaults.timestamp(self.now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return copy.deepcopy(self._commit(rt, "MODIFIED", new, current))
        return self._remove(rt, current)

    def _delete_pod(self, rt: ResourceType, current: Obj, grace: int | None) -> Obj:
        meta, spec = current["metadata"], current.get("spec", {})
        if grace is None:
            grace = meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
        grace = max(0, int(grace))
        phase = (current.get("status") or {}).get("phase")
        if grace == 0 or not spec.get("nodeName") or phase in TERMINAL_PHASES:
            new = copy.deepcopy(current)
            new["metadata"].setdefault("deletionTimestamp", defaults.timestamp(self.now()))
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._remove(rt, new)
        if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds", 0) <= grace:
            return copy.deepcopy(current)  # a longer grace never extends a running deletion
        new = copy.deepcopy(current)
        new["metadata"]["deletionTimestamp"] = defaults.timestamp(self.now() + timedelta(seconds=grace))
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        return copy.deepcopy(self._commit(rt, "MODIFIED", new, current))

    def _delete_namespace(self, rt: ResourceType, current: Obj) -> Obj:
        name = current["metadata"]["name"]
        if not current["metadata"].get("deletionTimestamp"):
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = defaults.timestamp(self.now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            current = self._commit(rt, "MODIFIED", new, current)
            for key, other in RESOURCES.items():
                if other.namespaced and key in self._objects:
                    for ns, obj_name in [k for k in self._objects[key] if k[0] == name]:
                        if self._key(other, ns, obj_name) in self._objects[key]:
                            self.delete(key, ns, obj_name)
        self._maybe_finish_namespace(name)
        return copy.deepcopy(current)

    def _maybe_finish_namespace(self, name: str) -> None:
        ns_obj = self._objects["namespaces"].get(("", name))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            return
        for key, other in RESOURCES.items():
            if other.namespaced and key in self._objects and any(k[0] == name for k in self._objects[key]):
                return
        self._remove(RESOURCES["namespaces"], ns_obj)

    def remove(self, rtype: str, namespace: str | None, name: str) -> None:
        """Final removal (DELETED event), e.g. by the kubelet once the pod's process is gone."""
        rt = self._rt(rtype)
        self._remove(rt, self._current(rt, namespace, name))

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        old = self._objects[rt.key].get(self._key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"]))
        final = copy.deepcopy(obj)
        self._commit(rt, "DELETED", final, old if old is not final else None)
        self._after_removal(rt, final)
        return copy.deepcopy(final)

    def _after_removal(self, rt: ResourceType, obj: Obj) -> None:
        uid = obj["metadata"].get("uid")
        orphan = uid in self._orphaning
        self._orphaning.discard(uid)
        owner_ns = obj["metadata"].get("namespace")
        for key in RESOURCES:
            if key not in self._objects:
                continue
            for dep in list(self._objects[key].values()):
                refs = dep["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                dep_ns = dep["metadata"].get("namespace")
                if owner_ns and dep_ns != owner_ns:
                    continue
                if orphan:
                    self.mutate(key, dep_ns, dep["metadata"]["name"], _drop_owner_reference(uid))
                else:
                    self.delete(key, dep_ns, dep["metadata"]["name"], propagation_policy="Background")
        if rt.namespaced and owner_ns:
            self._maybe_finish_namespace(owner_ns)

    # ---- watch -------------------------------------------------------------------------------

    def watch(
        self,
        rtype: str,
        namespace: str | None = None,
        resource_version: str | int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
        read_only: bool = False,
    ) -> Watch:
        """Open a watch. No version (or "0"): synthetic ADDED for every matching object, then
        live events. A version: every later event from the history ring, then live events;
        410 Expired when the ring no longer reaches back that far.

        ``read_only``: events carry the stored objects themselves, not copies, for an in-process
        controller that only reads them (the store replaces objects, it never changes one)."""
        rt = self._rt(rtype)
        match = matcher(label_selector, field_selector, rt.selectable_fields)
        w = Watch(self, rt, namespace if rt.namespaced else None, match, allow_bookmarks, read_only)
        if resource_version in (None, "", "0", 0):
            for obj in self._objects[rt.key].values():
                w._offer("ADDED", obj, None)
        else:
            try:
                since = int(resource_version)
            except (TypeError, ValueError):
                raise bad_request(f'invalid resource version "{resource_version}"') from None
            if since < self._compacted:
                raise gone(f"too old resource version: {since} ({self._compacted + 1})")
            for rv, key, etype, obj, old in self._history:
                if rv > since and key == rt.key:
                    w._offer(etype, obj, old)
        self._watchers[rt.key].add(w)
        return w

    def close_watches(self, rtype: str | None = None) -> None:
        """End open watches (all, or one type's), as an API server restart would."""
        for key, watchers in self._watchers.items():
            if rtype is None or key == self._rt(rtype).key:
                for w in list(watchers):
                    w.close()

    # ---- pods and events -----------------------------------------------------------------------

    def bind_pod(self, namespace: str, name: str, node_name: str) -> Obj:
        """The Binding subresource: set ``spec.nodeName``, PodScheduled=True, Normal Scheduled."""
        rt = RESOURCES["pods"]
        current = self._current(rt, namespace, name)
        if current["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, why=f"pod {name} is being deleted, cannot be assigned to a host")
        if current["spec"].get("nodeName"):
            raise conflict("pods/binding", name, why=f'pod {name} is already assigned to node "{current["spec"]["nodeName"]}"')
        stamp = defaults.timestamp(self.now())

        def bind(pod: Obj) -> None:
            pod["spec"]["nodeName"] = node_name
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
            conditions.insert(0, {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp})
            status["conditions"] = conditions
            # kube-apiserver 1.35 clears it on binding (ClearingNominatedNodeNameAfterBinding)
            status.pop("nominatedNodeName", None)

        pod = self.mutate("pods", namespace, name, bind)
        self.record_event(
            pod,
            "Scheduled",
            f"Successfully assigned {namespace}/{name} to {node_name}",
            component="default-scheduler",
            scheduler_style=True,
            action="Binding",
        )
        return pod

    def record_event(
        self, involved: Obj, reason: str, message: str, type: str = "Normal", component: str = "kubelet", **options: Any
    ) -> Obj:
        """Create a core/v1 Event about ``involved`` (``eventviews.recorded_event``, whose keyword
        options ``options`` are: scheduler_style, host, field_path, action, remote)."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        name = f"{meta.get('name')}.{time.time_ns() + self.resource_version:x}"
        event = eventviews.recorded_event(involved, name, reason, message, type, component, now=self.now(), **options)
        return self.create("events", event, namespace)


def _drop_owner_reference(uid: str):
    """A mutation that forgets the owner ``uid`` (orphan propagation), omitting an empty list."""

    def drop(obj: Obj) -> None:
        remaining = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        if remaining:
            obj["metadata"]["ownerReferences"] = remaining
        else:
            obj["metadata"].pop("ownerReferences", None)

    return drop


def _check_preconditions(rt: ResourceType, meta: Obj, preconditions: Mapping[str, Any] | None) -> None:
    """DeleteOptions.preconditions as kube-apiserver checks them (storage.Preconditions.Check):
    a mismatch is 409 Conflict with its wording."""
    if preconditions is None:
        return
    if not isinstance(preconditions, Mapping):
        raise bad_request("DeleteOptions.preconditions must be an object")
    for field, said in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = preconditions.get(field)
        if wanted is not None and str(wanted) != str(meta.get(field)):
            why = f"Precondition failed: {said} in precondition: {wanted}, {said} in object meta: {meta.get(field)}"
            raise conflict(rt.plural, meta["name"], rt.group, why=why)
