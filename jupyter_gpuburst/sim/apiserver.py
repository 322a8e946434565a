"""The emulated Kubernetes API server: HTTP (aiohttp) in front of one :class:`Store`.

Speaks enough of the REST API for unmodified KubeSpawner (kubernetes_asyncio), the official
``kubernetes`` client and kubectl: discovery, list/watch with selectors and resourceVersion,
create/get/replace/patch/delete, status/binding/log subresources, Tables for ``kubectl get``,
the minimal OpenAPI kubectl needs, SelfSubjectAccessReview, and optional fault injection.
JSON only. Every handler finishes its store work synchronously, so writes never wait.

Here are the route table and one short handler per verb over the store; the semantics live
elsewhere (store, patch, selectors, tables, rbac, openapi), and so do discovery, watch streams
(``watchserve``), pods/log (``podlog``), the two Event APIs' shapes (``eventviews``) and the
request and answer encoding (``apiwire``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim import apply, defaults, discovery, rbac, tables
from jupyter_gpuburst.sim.apiwire import JSON, dumps, int_param, json_response, not_found_path, truthy, wants_table
from jupyter_gpuburst.sim.errors import ApiError, bad_request, forbidden, method_not_allowed, not_found
from jupyter_gpuburst.sim.eventviews import core_event, event_v1, events_v1_fields
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubelet import exec as exec_stream
from jupyter_gpuburst.sim.patch import apply_patch
from jupyter_gpuburst.sim.podlog import LogReader, serve_log
from jupyter_gpuburst.sim.resources import EVENTS_V1_KEY, RESOURCES, ResourceType, by_path
from jupyter_gpuburst.sim.selectors import matcher
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.watch import Watch
from jupyter_gpuburst.sim.watchserve import EncodedEvents, WatchStreams

# API groups kube-apiserver serves itself (strategic merge patch works there, not on custom resources)
BUILT_IN_GROUPS = frozenset(
    {"", "storage.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io", "authorization.k8s.io", "scheduling.k8s.io"}
)
log = logging.getLogger(__name__)

DEFAULT_GIT_VERSION = "v1.31.0"

Obj = dict[str, Any]


def _verb(request: web.Request, name: str | None) -> str:
    """The verb RBAC checks for a resource request, as kube-apiserver's request info names it."""
    method = request.method
    if method == "GET":
        if truthy(request.query.get("watch")):
            return "watch"
        return "get" if name else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _dry_run(request: web.Request) -> bool:
    """``dryRun=All``: run the request's checks, persist nothing."""
    values = request.query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return bool(values)


class ApiServer(WatchStreams):
    """One cluster's API endpoint on ``http://host:port``."""

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Faults | None = None,
        log_reader: LogReader | None = None,
        git_version: str = DEFAULT_GIT_VERSION,
        exec_opener: exec_stream.Opener | None = None,
    ):
        self.store = store
        self.exec_opener = exec_opener  # the kubelet's: starts a command in a running container
        self.host = host
        self.port = port
        self.faults = faults or Faults()
        self.log_reader = log_reader
        self.git_version = git_version
        # (verb, group, resource) triples a SelfSubjectAccessReview answers "not allowed" for.
        self.denied: set[tuple[str, str, str]] = set()
        self._runner: web.AppRunner | None = None
        self._streams: set[Watch] = set()  # open watch streams, ended on stop()
        # Requests served per kind of call ("watch", "list", ...), for tests and benchmarks.
        self.stats: Counter[str] = Counter()
        self._encoded = EncodedEvents()
        # An idle watch that allowed bookmarks gets one after this many seconds.
        self.bookmark_interval_s = 10.0
        # Started again, it serves before its authorizer has read the roles, as kube-apiserver
        # does: for this long every request RBAC decides is 403 (2 s restarted idle; more under
        # load), and /readyz turns ready only this much later (its RBAC post-start hook reported
        # done 0.9 s after the 403s had stopped, never before). The first start is before
        # anyone's first request.
        self.authorizer_sync_s = 2.0
        self.readyz_lag_s = 1.0
        self._authorizer_synced_at = self._ready_at = 0.0
        self._started = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, shutdown_timeout=1.0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the OS-chosen port when port=0
        if self._started:
            self._authorizer_synced_at = asyncio.get_running_loop().time() + self.authorizer_sync_s
            self._ready_at = self._authorizer_synced_at + self.readyz_lag_s
        self._started = True
        log.info("API server listening on %s", self.url)

    def authorizer_synced(self) -> bool:
        """Whether the authorizer has the roles and bindings (not yet, just after a restart)."""
        return asyncio.get_running_loop().time() >= self._authorizer_synced_at

    def sync_authorizer(self) -> None:
        """The authorizer has the roles now, /readyz a moment later (a test ends the window so)."""
        self._authorizer_synced_at = asyncio.get_running_loop().time()
        self._ready_at = self._authorizer_synced_at + self.readyz_lag_s

    def ready(self) -> bool:
        """What /readyz says: not before the authorizer has synced, and a moment after."""
        return asyncio.get_running_loop().time() >= self._ready_at

    def drop_watches(self) -> int:
        """End every open HTTP watch stream, as a dropped connection would (faults); returns how many.

        Only the streams this server serves: in-process watchers of the store stay open.
        """
        streams = list(self._streams)
        for watch in streams:
            watch.close()
        return len(streams)

    async def stop(self) -> None:
        for watch in list(self._streams):
            watch.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- plumbing --------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        try:
            if request.path.startswith(("/api", "/apis")):
                if self.faults.latency_s:
                    await asyncio.sleep(self.faults.latency_s)
                if not truthy(request.query.get("watch")):
                    code = self.faults.pick_error()
                    if code == 429:
                        err = ApiError(429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": 1})
                        return web.Response(text=dumps(err.status()), status=429, content_type=JSON, headers={"Retry-After": "1"})
                    if code == 500:
                        return json_response(ApiError(500, "InternalError", "Internal error occurred: injected fault").status(), 500)
            return await handler(request)
        except ApiError as err:
            return json_response(err.status(), err.code)
        except json.JSONDecodeError as err:
            return json_response(bad_request(f"the body of the request could not be decoded: {err}").status(), 400)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        return json.loads(raw)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3", "/version"]})
        head = parts[0]
        if head == "version" and len(parts) == 1:
            return json_response(discovery.version(self.git_version))
        if head == "readyz":
            self.stats["readyz"] += 1
        if head == "readyz" and not self.ready():
            # kube-apiserver's answer while its RBAC post-start hook runs
            failed = "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n"
            return web.Response(text=failed, status=500)
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "openapi":
            return discovery.openapi_document(parts[1:], self.git_version)
        if head == "api":
            if len(parts) == 1:
                return json_response(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}],
                    }
                )
            if parts[1] != "v1":
                raise not_found_path()
            return await self._resource(request, "", "v1", parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return json_response(discovery.group_list())
            if len(parts) == 2:
                return json_response(discovery.api_group(parts[1]))
            return await self._resource(request, parts[1], parts[2], parts[3:])
        raise not_found_path()

    # ---- resources ----------------------------------------------------------------------------------

    async def _resource(self, request: web.Request, group: str, version: str, rest: list[str]) -> web.StreamResponse:
        if not rest:
            if request.method != "GET":
                raise method_not_allowed()
            return json_response(discovery.resource_list(group, version))
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        rt = by_path(group, version, rest[0])
        if namespace is not None and not rt.namespaced:
            raise not_found_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub and sub not in rt.subresources):
            raise not_found_path()
        ns = namespace if rt.namespaced else None
        method = request.method
        who = self._identity(request)
        if who is not None:
            asked = rbac.Request(_verb(request, name), rt.group, rt.plural, sub or "", ns or "", name or "")
            if not self.authorizer_synced() or not rbac.authorize(self.store, who, asked)[0]:
                raise forbidden(rbac.forbidden_message(who, asked))
        if rt.key == EVENTS_V1_KEY:
            if method == "POST" and name is None and ns is not None:
                created = self.store.create("events", core_event(await self._body(request) or {}), ns, dry_run=_dry_run(request))
                return json_response(event_v1(created), 201)
            if method != "GET":
                raise method_not_allowed()
            return await self._events_v1(request, ns, name)
        if rt.key == "selfsubjectaccessreviews.authorization.k8s.io":
            if method != "POST" or name:
                raise method_not_allowed()
            return json_response(self._access_review(await self._body(request), who), 201)
        if name is None:
            return await self._collection(request, rt, ns)
        if rt.namespaced and ns is None:
            raise not_found_path()
        return await self._item(request, rt, ns, name, sub)

    async def _collection(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.StreamResponse:
        """``/.../{plural}``: list, watch, create, delete collection."""
        method = request.method
        if method == "GET":
            if truthy(request.query.get("watch")):
                return await self._watch(request, rt, ns)
            return self._list(request, rt, ns)
        if method == "POST":
            if rt.namespaced and ns is None:
                raise method_not_allowed()
            return json_response(self.store.create(rt.key, await self._body(request) or {}, ns, dry_run=_dry_run(request)), 201)
        if method == "DELETE":
            return await self._delete_collection(request, rt, ns)
        raise method_not_allowed()

    async def _item(self, request: web.Request, rt: ResourceType, ns: str | None, name: str, sub: str | None) -> web.StreamResponse:
        """``/.../{plural}/{name}[/{subresource}]``."""
        method = request.method
        if sub == "binding":
            if method != "POST":
                raise method_not_allowed()
            return await self._binding(request, ns or "", name)
        if sub == "log":
            if method != "GET":
                raise method_not_allowed()
            return await serve_log(request, self.store, self.log_reader, ns or "", name)
        if sub == "exec":
            if method not in ("GET", "POST"):
                raise method_not_allowed()
            self.store.get("pods", ns, name)  # 404 for a missing pod, before any upgrade
            return await exec_stream.serve(request, ns or "", name, self.exec_opener)
        if method == "GET":
            self.stats["get"] += 1
            obj = self.store.get(rt.key, ns, name)
            if wants_table(request):
                return json_response(
                    tables.table(
                        rt, [obj], obj["metadata"]["resourceVersion"], include_object=request.query.get("includeObject", "Metadata")
                    )
                )
            return json_response(obj)
        if method == "PUT":
            body = await self._body(request)
            if not isinstance(body, dict):
                raise bad_request("the body of the request is not an object")
            meta = body.setdefault("metadata", {})
            if meta.get("name") and meta["name"] != name:
                raise bad_request("the name of the object does not match the name on the URL")
            meta["name"] = name
            if ns is not None:
                meta.setdefault("namespace", ns)
            return json_response(self.store.replace(rt.key, body, subresource=sub, dry_run=_dry_run(request)))
        if method == "PATCH":
            if request.headers.get("Content-Type", "").split(";")[0].strip().lower() == apply.APPLY_PATCH:
                return await self._apply(request, rt, ns, name, sub)
            return json_response(await self._patch(request, rt, ns, name, sub))
        if method == "DELETE":
            if sub:
                raise method_not_allowed()
            return json_response(await self._delete(request, rt, ns, name))
        raise method_not_allowed()

    def _list(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.Response:
        q = request.query
        rv_match = q.get("resourceVersionMatch")
        rv = q.get("resourceVersion")
        if rv_match and rv_match not in ("NotOlderThan", "Exact"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{rv_match}"')
        if rv_match == "Exact" and rv != str(self.store.resource_version):
            # Only the present is kept, not past states.
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.store.resource_version})")
        limit = int_param(q, "limit")
        token = q.get("continue")
        if token and rv not in (None, "", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        self.stats["list"] += 1
        list_meta: Obj
        if limit or token:
            items, list_rv, next_token, remaining = self.store.list_page(
                rt.key, ns, q.get("labelSelector"), q.get("fieldSelector"), limit if limit and limit > 0 else None, token
            )
            list_meta = {"resourceVersion": list_rv}
            if next_token:
                list_meta["continue"] = next_token
            if remaining is not None:
                list_meta["remainingItemCount"] = remaining
        else:
            items, list_rv = self.store.list(rt.key, ns, q.get("labelSelector"), q.get("fieldSelector"))
            list_meta = {"resourceVersion": list_rv}
        if wants_table(request):
            table = tables.table(rt, items, list_rv, include_object=q.get("includeObject", "Metadata"))
            table["metadata"].update({k: v for k, v in list_meta.items() if k != "resourceVersion"})
            return json_response(table)
        return json_response({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": list_meta, "items": items})

    async def _apply(self, request: web.Request, rt: ResourceType, ns: str | None, name: str, sub: str | None) -> web.Response:
        """Server-side apply (see sim.apply); creates the object when it is missing."""
        manager = request.query.get("fieldManager")
        if not manager:
            raise bad_request("PATCH /apply requires fieldManager")
        force = truthy(request.query.get("force"))
        body = apply.parse_body(await request.read())
        if body.get("kind") != rt.kind or body.get("apiVersion") != rt.api_version:
            raise bad_request(
                f"the applied object must be a {rt.kind} of {rt.api_version} (got kind {body.get('kind')!r}, apiVersion {body.get('apiVersion')!r})"
            )
        meta = body.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != name:
            raise bad_request("the name of the object does not match the name on the URL")
        if ns is not None and meta.get("namespace") not in (None, ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        now = defaults.timestamp(self.store.now())
        dry_run = _dry_run(request)
        if not self.store.exists(rt.key, ns, name):
            if sub:
                raise not_found(rt.plural, name, rt.group)
            created = self.store.create(rt.key, apply.apply(None, body, manager, force=force, now=now), ns, dry_run=dry_run)
            return json_response(created, 201)
        current = self.store.get(rt.key, ns, name)
        result = apply.apply(current, body, manager, force=force, now=now)
        result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return json_response(self.store.replace(rt.key, result, subresource=sub, dry_run=dry_run))

    async def _patch(self, request: web.Request, rt: ResourceType, ns: str | None, name: str, sub: str | None) -> Obj:
        patch = await self._body(request)
        current = self.store.get(rt.key, ns, name)
        patched = apply_patch(current, patch, request.headers.get("Content-Type", ""), custom=rt.group not in BUILT_IN_GROUPS)
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        meta = patched.setdefault("metadata", {})
        if meta.get("name") != name:
            raise bad_request("the name of the object does not match the name on the URL")
        # A patch conflicts only when it names a resourceVersion itself.
        patch_meta = patch.get("metadata") if isinstance(patch, dict) else None
        names_rv = (isinstance(patch_meta, dict) and "resourceVersion" in patch_meta) or (
            isinstance(patch, list) and any(op.get("path") == "/metadata/resourceVersion" for op in patch if isinstance(op, dict))
        )
        if not names_rv:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.store.replace(rt.key, patched, subresource=sub, dry_run=_dry_run(request))

    async def _delete_options(self, request: web.Request) -> tuple[int | None, str | None, Any]:
        body = await self._body(request) or {}
        if not isinstance(body, dict):
            raise bad_request("DeleteOptions must be an object")
        grace = body.get("gracePeriodSeconds")
        if grace is None:
            grace = int_param(request.query, "gracePeriodSeconds")
        policy = body.get("propagationPolicy") or request.query.get("propagationPolicy")
        if policy is None and (body.get("orphanDependents") is True or truthy(request.query.get("orphanDependents"))):
            policy = "Orphan"
        return grace, policy, body.get("preconditions")

    async def _delete(self, request: web.Request, rt: ResourceType, ns: str | None, name: str) -> Obj:
        grace, policy, preconditions = await self._delete_options(request)
        if _dry_run(request):
            return self.store.get(rt.key, ns, name)
        deleted = self.store.delete(rt.key, ns, name, grace, policy, preconditions)
        if rt.key in RETURNS_DELETED_OBJECT or self.store.exists(rt.key, ns, name):
            # kept for finalizers or a graceful deletion: the object, with its deletionTimestamp
            return deleted
        return deleted_status(rt, deleted)

    async def _delete_collection(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.Response:
        grace, policy, preconditions = await self._delete_options(request)
        items, _rv = self.store.list(rt.key, ns, request.query.get("labelSelector"), request.query.get("fieldSelector"))
        deleted = []
        for obj in items:
            try:
                deleted.append(
                    self.store.delete(rt.key, obj["metadata"].get("namespace"), obj["metadata"]["name"], grace, policy, preconditions)
                )
            except ApiError as err:
                if err.code != 404:  # already gone through a cascade
                    raise
        return json_response(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": deleted,
            }
        )

    async def _binding(self, request: web.Request, ns: str, name: str) -> web.Response:
        body = await self._body(request) or {}
        target = body.get("target") if isinstance(body, dict) else None
        if not isinstance(target, dict) or not target.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f'Binding.meta.k8s.io "{name}" is invalid: target.name: Required value',
                {
                    "name": name,
                    "kind": "Binding",
                    "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "target.name"}],
                },
            )
        self.store.bind_pod(ns, name, target["name"])
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    @staticmethod
    def _identity(request: web.Request) -> rbac.Identity | None:
        """Whom a request acts as: an impersonated identity, or None for the emulator's admin."""
        try:
            return rbac.impersonated(request.headers.get("Impersonate-User"), request.headers.getall("Impersonate-Group", []))
        except ValueError as err:
            raise bad_request(str(err)) from err

    def _access_review(self, body: Any, who: rbac.Identity | None) -> Obj:
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise bad_request("SelfSubjectAccessReview needs a spec")
        attrs = body["spec"].get("resourceAttributes") or {}
        key = (attrs.get("verb", ""), attrs.get("group", ""), attrs.get("resource", ""))
        denied = bool(attrs) and any(all(want in ("*", have) for want, have in zip(rule, key, strict=True)) for rule in self.denied)
        status: Obj = {"allowed": not denied}
        if denied:
            status["reason"] = f"denied by the emulator's deny rules for {key[0]} {key[2]}"
        elif who is None:
            status["reason"] = "allowed by the emulator (its admin: system:masters)"
        elif attrs:
            asked = rbac.Request(*key, attrs.get("subresource", ""), attrs.get("namespace", ""), attrs.get("name", ""))
            status["allowed"], reason = rbac.authorize(self.store, who, asked)
            if reason:
                status["reason"] = reason
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {},
            "spec": body["spec"],
            "status": status,
        }

    async def _events_v1(self, request: web.Request, ns: str | None, name: str | None) -> web.StreamResponse:
        """events.k8s.io/v1: the core Events converted, read-only."""
        rt = RESOURCES[EVENTS_V1_KEY]
        field_selector = events_v1_fields(request.query.get("fieldSelector"))
        if name is not None:
            return json_response(event_v1(self.store.get("events", ns, name)))
        if truthy(request.query.get("watch")):
            matcher(request.query.get("labelSelector"), request.query.get("fieldSelector"), rt.selectable_fields)
            return await self._watch(request, rt, ns, store_key="events", field_selector=field_selector, convert=event_v1)
        matcher(request.query.get("labelSelector"), request.query.get("fieldSelector"), rt.selectable_fields)
        items, rv = self.store.list("events", ns, request.query.get("labelSelector"), field_selector)
        return json_response(
            {
                "kind": "EventList",
                "apiVersion": "events.k8s.io/v1",
                "metadata": {"resourceVersion": rv},
                "items": [event_v1(e) for e in items],
            }
        )


# Registries built with ``ReturnDeletedObject: true`` in kube-apiserver (pods, services, PVCs,
# service accounts) and namespaces (their own Delete): an immediate delete answers with the object.
# Every other type (configmaps, secrets, events, nodes, custom resources) answers with a Status.
RETURNS_DELETED_OBJECT = frozenset({"pods", "services", "persistentvolumeclaims", "serviceaccounts", "namespaces"})


def deleted_status(rt: ResourceType, obj: Obj) -> Obj:
    """The Status of a completed delete (genericregistry.Store.finalizeDelete)."""
    meta = obj.get("metadata") or {}
    details: Obj = {"name": meta.get("name", ""), "kind": rt.plural, "uid": meta.get("uid", "")}
    if rt.group:
        details = {"name": details["name"], "group": rt.group, "kind": rt.plural, "uid": details["uid"]}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
