"""The emulated Kubernetes API server: HTTP (aiohttp) in front of one :class:`Store`.

Speaks enough of the REST API for unmodified KubeSpawner (kubernetes_asyncio), the official
``kubernetes`` client and kubectl: discovery, list/watch with selectors and resourceVersion,
create/get/replace/patch/delete, status/binding/log subresources, Tables for ``kubectl get``,
the minimal OpenAPI kubectl needs, SelfSubjectAccessReview, and optional fault injection.
JSON only. Every handler finishes its store work synchronously, so writes never wait.

Longer than 600 lines: it is the route table and one short handler per verb over the store; the
semantics live elsewhere (store, patch, selectors, tables, rbac, openapi).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim import apply, defaults, openapi, rbac, tables
from jupyter_gpuburst.sim.errors import ApiError, bad_request, forbidden, method_not_allowed, not_found
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubelet import exec as exec_stream
from jupyter_gpuburst.sim.patch import apply_patch
from jupyter_gpuburst.sim.resources import EVENTS_V1_KEY, RESOURCES, ResourceType, by_path, group_versions
from jupyter_gpuburst.sim.selectors import matcher
from jupyter_gpuburst.sim.store import Store, Watch

# API groups kube-apiserver serves itself (strategic merge patch works there, not on custom resources)
BUILT_IN_GROUPS = frozenset(
    {"", "storage.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io", "authorization.k8s.io", "scheduling.k8s.io"}
)
log = logging.getLogger(__name__)

DEFAULT_GIT_VERSION = "v1.31.0"
JSON = "application/json"
# How long an idle watch waits before checking its deadline, client and bookmark needs.
_WATCH_TICK_S = 1.0

Obj = dict[str, Any]
# (namespace, pod, container or None for the first, previous instance) -> log file
LogReader = Callable[[str, str, "str | None", bool], "Path | None"]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class EncodedEvents:
    """Watch events encoded once for every watcher, as kube-apiserver's watch cache does.

    A plain watch (no Table, no conversion) hands out the stored object itself; its event line
    depends only on the event type and that object, so the line is built once and shared by
    every stream the event goes to. Keyed by the object's identity and resourceVersion (an
    object is replaced, never changed, so the pair names one content); the entry holds the
    object, so the identity cannot be reused while the line is cached.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._lines: OrderedDict[tuple[str, int, str], tuple[Obj, bytes]] = OrderedDict()

    def line(self, etype: str, obj: Obj) -> bytes:
        key = (etype, id(obj), obj["metadata"].get("resourceVersion", ""))
        cached = self._lines.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        line = (_dumps({"type": etype, "object": obj}) + "\n").encode()
        self._lines[key] = (obj, line)
        if len(self._lines) > self.size:
            self._lines.popitem(last=False)
        return line


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(obj), status=status, content_type=JSON)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _verb(request: web.Request, name: str | None) -> str:
    """The verb RBAC checks for a resource request, as kube-apiserver's request info names it."""
    method = request.method
    if method == "GET":
        if _truthy(request.query.get("watch")):
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


def _int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {raw!r}") from None


class ApiServer:
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
        log.info("API server listening on %s", self.url)

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
                if not _truthy(request.query.get("watch")):
                    code = self.faults.pick_error()
                    if code == 429:
                        err = ApiError(429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": 1})
                        return web.Response(text=_dumps(err.status()), status=429, content_type=JSON, headers={"Retry-After": "1"})
                    if code == 500:
                        return _json(ApiError(500, "InternalError", "Internal error occurred: injected fault").status(), 500)
            return await handler(request)
        except ApiError as err:
            return _json(err.status(), err.code)
        except json.JSONDecodeError as err:
            return _json(bad_request(f"the body of the request could not be decoded: {err}").status(), 400)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        return json.loads(raw)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json({"paths": ["/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3", "/version"]})
        head = parts[0]
        if head == "version" and len(parts) == 1:
            return _json(self._version())
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if head == "openapi":
            return self._openapi(parts[1:])
        if head == "api":
            if len(parts) == 1:
                return _json(
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
                return _json(self._group_list())
            if len(parts) == 2:
                return _json(self._group(parts[1]))
            return await self._resource(request, parts[1], parts[2], parts[3:])
        raise not_found_path()

    # ---- discovery ---------------------------------------------------------------------------------

    def _version(self) -> Obj:
        major, minor = self.git_version.lstrip("v").split(".")[:2]
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2024-08-13T07:28:49Z",
            "goVersion": "go1.22.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _group(self, group: str) -> Obj:
        versions = group_versions().get(group)
        if not group or not versions:
            raise not_found_path()
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}

    def _group_list(self) -> Obj:
        groups = [self._group(g) for g in group_versions() if g]
        for g in groups:
            del g["kind"], g["apiVersion"]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources = []
        for rt in RESOURCES.values():
            if rt.group != group or rt.version != version:
                continue
            entry: Obj = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in rt.subresources:
                kind, verbs = {
                    "status": (rt.kind, ["get", "patch", "update"]),
                    "binding": ("Binding", ["create"]),
                    "log": ("Pod", ["get"]),
                    "exec": ("PodExecOptions", ["create", "get"]),
                }[sub]
                resources.append(
                    {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs}
                )
        if not resources:
            raise not_found_path()
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    def _openapi(self, parts: list[str]) -> web.Response:
        if parts == ["v2"]:
            # Empty protobuf document: what kubectl 1.27-1.28 accept when validating.
            return web.Response(body=b"", content_type="application/octet-stream")
        if parts == ["v3"]:
            return _json(openapi.root_document(self.git_version))
        if len(parts) >= 3 and parts[0] == "v3":
            if parts[1] == "api" and len(parts) == 3:
                doc = openapi.group_version_document("", parts[2], self.git_version)
            elif parts[1] == "apis" and len(parts) == 4:
                doc = openapi.group_version_document(parts[2], parts[3], self.git_version)
            else:
                doc = None
            if doc is not None:
                return _json(doc)
        raise not_found_path()

    # ---- resources ----------------------------------------------------------------------------------

    async def _resource(self, request: web.Request, group: str, version: str, rest: list[str]) -> web.StreamResponse:
        if not rest:
            if request.method != "GET":
                raise method_not_allowed()
            return _json(self._resource_list(group, version))
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
            if not rbac.authorize(self.store, who, asked)[0]:
                raise forbidden(rbac.forbidden_message(who, asked))
        if rt.key == EVENTS_V1_KEY:
            if method == "POST" and name is None and ns is not None:
                created = self.store.create("events", core_event(await self._body(request) or {}), ns, dry_run=_dry_run(request))
                return _json(event_v1(created), 201)
            if method != "GET":
                raise method_not_allowed()
            return await self._events_v1(request, ns, name)
        if rt.key == "selfsubjectaccessreviews.authorization.k8s.io":
            if method != "POST" or name:
                raise method_not_allowed()
            return _json(self._access_review(await self._body(request), who), 201)
        if name is None:
            return await self._collection(request, rt, ns)
        if rt.namespaced and ns is None:
            raise not_found_path()
        return await self._item(request, rt, ns, name, sub)

    async def _collection(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.StreamResponse:
        """``/.../{plural}``: list, watch, create, delete collection."""
        method = request.method
        if method == "GET":
            if _truthy(request.query.get("watch")):
                return await self._watch(request, rt, ns)
            return self._list(request, rt, ns)
        if method == "POST":
            if rt.namespaced and ns is None:
                raise method_not_allowed()
            return _json(self.store.create(rt.key, await self._body(request) or {}, ns, dry_run=_dry_run(request)), 201)
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
            return await self._log(request, ns or "", name)
        if sub == "exec":
            if method not in ("GET", "POST"):
                raise method_not_allowed()
            self.store.get("pods", ns, name)  # 404 for a missing pod, before any upgrade
            return await exec_stream.serve(request, ns or "", name, self.exec_opener)
        if method == "GET":
            self.stats["get"] += 1
            obj = self.store.get(rt.key, ns, name)
            if self._wants_table(request):
                return _json(
                    tables.table(
                        rt, [obj], obj["metadata"]["resourceVersion"], include_object=request.query.get("includeObject", "Metadata")
                    )
                )
            return _json(obj)
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
            return _json(self.store.replace(rt.key, body, subresource=sub, dry_run=_dry_run(request)))
        if method == "PATCH":
            if request.headers.get("Content-Type", "").split(";")[0].strip().lower() == apply.APPLY_PATCH:
                return await self._apply(request, rt, ns, name, sub)
            return _json(await self._patch(request, rt, ns, name, sub))
        if method == "DELETE":
            if sub:
                raise method_not_allowed()
            return _json(await self._delete(request, rt, ns, name))
        raise method_not_allowed()

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _list(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.Response:
        q = request.query
        rv_match = q.get("resourceVersionMatch")
        rv = q.get("resourceVersion")
        if rv_match and rv_match not in ("NotOlderThan", "Exact"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{rv_match}"')
        if rv_match == "Exact" and rv != str(self.store.resource_version):
            # Only the present is kept, not past states.
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.store.resource_version})")
        limit = _int_param(q, "limit")
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
        if self._wants_table(request):
            table = tables.table(rt, items, list_rv, include_object=q.get("includeObject", "Metadata"))
            table["metadata"].update({k: v for k, v in list_meta.items() if k != "resourceVersion"})
            return _json(table)
        return _json({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": list_meta, "items": items})

    async def _watch(
        self,
        request: web.Request,
        rt: ResourceType,
        ns: str | None,
        *,
        store_key: str | None = None,
        field_selector: str | None = None,
        convert: Callable[[Obj], Obj] | None = None,
    ) -> web.StreamResponse:
        """A watch stream; ``store_key``/``field_selector``/``convert`` serve one stored type in
        another API's shape (events.k8s.io/v1 Events from the core Events)."""
        q = request.query
        timeout = _int_param(q, "timeoutSeconds")
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        table = self._wants_table(request)
        include = q.get("includeObject", "Metadata")
        try:
            if self.faults.is_expired(q.get("resourceVersion")):
                raise ApiError(410, "Expired", f"too old resource version: {q.get('resourceVersion')} ({self.faults.expired_below})")
            # a plain watch only serializes what it is given: the stored objects, shared and encoded once
            plain = convert is None and not table
            watch = self.store.watch(
                store_key or rt.key,
                ns,
                q.get("resourceVersion"),
                q.get("labelSelector"),
                field_selector if store_key else q.get("fieldSelector"),
                allow_bookmarks=bookmarks,
                read_only=plain,
            )
        except ApiError as err:
            if err.code != 410:
                raise
            # A too-old version is reported in-stream, as kube-apiserver does.
            response = await self._open_stream(request)
            await response.write((_dumps({"type": "ERROR", "object": err.status()}) + "\n").encode())
            await response.write_eof()
            return response
        response = await self._open_stream(request)
        self.stats["watch"] += 1
        self._streams.add(watch)
        deadline = None if timeout is None else time.monotonic() + timeout
        sent = 0
        last_write = time.monotonic()
        try:
            while not watch.closed:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if request.transport is None or request.transport.is_closing():
                    break
                tick = min(_WATCH_TICK_S, self.bookmark_interval_s) if bookmarks else _WATCH_TICK_S
                wait = tick if deadline is None else min(tick, deadline - now)
                event = await watch.next(wait)
                if event is None:
                    if watch.closed:
                        break
                    if bookmarks and time.monotonic() - last_write >= self.bookmark_interval_s:
                        event = watch.bookmark()
                    else:
                        continue
                etype, obj = event
                if plain and etype != "BOOKMARK":
                    await response.write(self._encoded.line(etype, obj))
                else:
                    if convert is not None and etype != "BOOKMARK":
                        obj = convert(obj)
                    if table and etype != "BOOKMARK":
                        obj = tables.table(rt, [obj], obj["metadata"].get("resourceVersion", ""), include_object=include, headers=sent == 0)
                    await response.write((_dumps({"type": etype, "object": obj}) + "\n").encode())
                last_write = time.monotonic()
                sent += 1
                if self.faults.drop_watch_after is not None and sent >= self.faults.drop_watch_after:
                    break  # the injected drop: end the stream mid-watch
        finally:
            watch.close()
            self._streams.discard(watch)
        try:
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    @staticmethod
    async def _open_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        return response

    async def _apply(self, request: web.Request, rt: ResourceType, ns: str | None, name: str, sub: str | None) -> web.Response:
        """Server-side apply (see sim.apply); creates the object when it is missing."""
        manager = request.query.get("fieldManager")
        if not manager:
            raise bad_request("PATCH /apply requires fieldManager")
        force = _truthy(request.query.get("force"))
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
            return _json(created, 201)
        current = self.store.get(rt.key, ns, name)
        result = apply.apply(current, body, manager, force=force, now=now)
        result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return _json(self.store.replace(rt.key, result, subresource=sub, dry_run=dry_run))

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
            grace = _int_param(request.query, "gracePeriodSeconds")
        policy = body.get("propagationPolicy") or request.query.get("propagationPolicy")
        if policy is None and (body.get("orphanDependents") is True or _truthy(request.query.get("orphanDependents"))):
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
        return _json(
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
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    async def _log(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        pod = self.store.get("pods", ns, name)
        containers = [c["name"] for c in pod["spec"].get("containers", [])]
        init = [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = request.query.get("container")
        if not container:
            if len(containers) > 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}] or one of the init containers: [{' '.join(init)}]"
                    if init
                    else f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers + init:
            raise bad_request(f"container {container} is not valid for pod {name}")
        previous = _truthy(request.query.get("previous"))
        path = self.log_reader(ns, name, container, previous) if self.log_reader else None
        if path is None or not Path(path).exists():
            if previous:
                raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        tail = _int_param(request.query, "tailLines")
        limit = _int_param(request.query, "limitBytes")
        data = Path(path).read_bytes()
        offset = len(data)
        if tail is not None:
            data = b"".join(data.splitlines(keepends=True)[-tail:]) if tail > 0 else b""
        if limit is not None:
            data = data[:limit]
        if not _truthy(request.query.get("follow")):
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(data)
        while request.transport is not None and not request.transport.is_closing():
            try:
                current = self.store.get("pods", ns, name)
            except ApiError:
                break
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            if chunk:
                offset += len(chunk)
                await response.write(chunk)
            elif current["metadata"]["uid"] != pod["metadata"]["uid"] or _instance_ended(current, container):
                break
            await asyncio.sleep(0.2)
        await response.write_eof()
        return response

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
        field_selector = _events_v1_fields(request.query.get("fieldSelector"))
        if name is not None:
            return _json(event_v1(self.store.get("events", ns, name)))
        if _truthy(request.query.get("watch")):
            matcher(request.query.get("labelSelector"), request.query.get("fieldSelector"), rt.selectable_fields)
            return await self._watch(request, rt, ns, store_key="events", field_selector=field_selector, convert=event_v1)
        matcher(request.query.get("labelSelector"), request.query.get("fieldSelector"), rt.selectable_fields)
        items, rv = self.store.list("events", ns, request.query.get("labelSelector"), field_selector)
        return _json(
            {
                "kind": "EventList",
                "apiVersion": "events.k8s.io/v1",
                "metadata": {"resourceVersion": rv},
                "items": [event_v1(e) for e in items],
            }
        )


def _instance_ended(pod: Obj, container: str) -> bool:
    """Whether the followed container instance is no longer running (a follow then ends)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if cs.get("name") == container:
            state = cs.get("state") or {}
            return "terminated" in state or ("waiting" in state and bool(cs.get("lastState")))
    return False


def _events_v1_fields(selector: str | None) -> str | None:
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


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})
