"""The emulator's ``Store`` interface over a real kube-apiserver, for the node agents that serve it.

The process kubelet, Liqo's reflection and the volume binder were written against the
emulator's in-process ``Store``. On the real control plane they read and write the API server
instead, as a kubelet or a virtual kubelet does:
- reads come from an informer cache (a LIST, then a WATCH resumed from its last version, the
  LIST repeated after 410 Gone), so ``get``, ``list`` and ``iter_objects`` stay synchronous and
  cheap, and ``watch`` hands out the cache's events;
- ``mutate`` (status, node images) applies the change to the cached copy at once and queues it
  for the API server, where it is applied again to the newest object and written with its
  resourceVersion, again on 409 Conflict, as the kubelet's status manager syncs status;
- ``record_event`` posts in the background (a lost event is logged, never fatal, as client-go's
  recorder drops them);
- the background writes and Events send at most ``IN_FLIGHT`` requests at once, as a kubelet's
  client has a QPS limit: unbounded, a 200-student rush queued hundreds in httpx's connection
  pool, which walks its whole queue on every change (httpcore's
  ``_assign_requests_to_connections``, 83 % of the agents' main thread under py-spy), so the
  nodes' lease and status threads got so little of the interpreter that every node went
  ``Ready: Unknown``;
- ``create``, ``delete`` and ``remove`` go to the API server at once (a short blocking call: the
  callers use the object returned).

An API server away (restarted, its etcd down, the whole site lost) is met as a node agent meets
it: every watch is resumed from its last version once the server answers again, and listed anew
when that version is gone (410); queued writes wait and are sent again on a 429 or 5xx answer
or a broken connection, never dropped; and a blocking call that cannot reach the server raises
``ApiError`` 503, as the emulator answers when it is unavailable, so that the node agents' own
error handling (written against ``ApiError``) applies instead of a transport error ending them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import ssl
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import httpx

from jupyter_gpuburst.sim import eventviews
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.resources import ResourceType, resource
from jupyter_gpuburst.sim.selectors import matcher, select
from jupyter_gpuburst.sim.watch import Watch

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Key = tuple[str, str]
WRITE_TRIES = 5
IN_FLIGHT = 32  # background requests at once (module docstring), well under httpx's pool of 100
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; it is resumed from its last version
RETRY_DELAY_S = 0.5
STORAGE_READY_S = 60.0
# answers that say "not now": the request is sent again rather than given up
TRANSIENT = frozenset({429, 500, 502, 503, 504})
WEBHOOKS = "validatingwebhookconfigurations.admissionregistration.k8s.io"
# kinds a node agent (or a test acting as the admin) uses on a real API server that the
# emulator does not serve
EXTRA_TYPES = {
    "leases": ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True),
    WEBHOOKS: ResourceType(
        "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False
    ),
}


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    return ApiError(response.status_code, body.get("reason", "Unknown"), body.get("message", response.text[:200]), body.get("details"))


def _unreachable(exc: httpx.HTTPError) -> ApiError:
    return ApiError(503, "ServiceUnavailable", f"the API server is not reachable: {type(exc).__name__}")


class RemoteStore:
    """``Store``'s interface for node agents, against the API server at ``url``.

    ``cached`` names the resource types read (and watched) through the cache; ``start()`` fills
    it before returning. ``credentials`` is ``(ca_file, cert_file, key_file)``.
    """

    def __init__(self, url: str, credentials: tuple[str, str, str], cached: tuple[str, ...]):
        self.url = url.rstrip("/")
        ca, cert, key = credentials
        self._ssl = ssl.create_default_context(cafile=ca)
        self._ssl.load_cert_chain(cert, key)
        self._async = httpx.AsyncClient(verify=self._ssl, timeout=httpx.Timeout(10.0, read=WATCH_TIMEOUT_S + 30))
        self._sync = httpx.Client(verify=self._ssl, timeout=10.0)
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)
        self._types = {self._rt(k).key: self._rt(k) for k in cached}
        self._objects: dict[str, dict[Key, Obj]] = {k: {} for k in self._types}
        self._watchers: dict[str, set[Watch]] = defaultdict(set)
        self._pending: dict[tuple[str, Key], list[Callable[[Obj], Any]]] = {}
        self._writers: dict[tuple[str, Key], asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self._stopped = False
        self.resource_version = 0

    # -- paths ---------------------------------------------------------------------------------

    def _collection(self, rt: ResourceType, namespace: str | None) -> str:
        base = f"{self.url}/api/{rt.version}" if not rt.group else f"{self.url}/apis/{rt.group}/{rt.version}"
        if rt.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{rt.plural}"
        return f"{base}/{rt.plural}"

    def _item(self, rt: ResourceType, namespace: str | None, name: str, subresource: str = "") -> str:
        path = f"{self._collection(rt, namespace if rt.namespaced else None)}/{name}"
        return f"{path}/{subresource}" if subresource else path

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "" if rt.namespaced else "", name)

    def _rt(self, rtype: str) -> ResourceType:
        return EXTRA_TYPES.get(rtype) or resource(rtype)

    def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._sync.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc

    # -- cache ---------------------------------------------------------------------------------

    async def start(self) -> None:
        for key, rt in self._types.items():
            version = await self._relist(rt)
            self._tasks.append(asyncio.create_task(self._watch_loop(rt, version), name=f"remote-watch-{key}"))

    async def stop(self) -> None:
        # no write is queued again once stopping: a cancelled writer would start another, on a closed client
        self._stopped = True
        for task in [*self._tasks, *self._writers.values(), *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._writers.values(), *self._background, return_exceptions=True)
        self.close_watches()
        await self._async.aclose()
        self._sync.close()

    async def _relist(self, rt: ResourceType) -> str:
        # a CRD just Established, or the API server just back, may answer 503 while its storage starts
        deadline = time.monotonic() + STORAGE_READY_S
        while True:
            response = await self._async.get(self._collection(rt, None))
            if response.status_code == 200:
                break
            if response.status_code not in (429, 503) or time.monotonic() > deadline:
                raise _error(response)
            await asyncio.sleep(RETRY_DELAY_S)
        body = response.json()
        fresh = {}
        for item in body.get("items", []):
            item.setdefault("kind", rt.kind)
            item.setdefault("apiVersion", rt.api_version)
            fresh[self._key(rt, item["metadata"].get("namespace"), item["metadata"]["name"])] = item
        old = self._objects[rt.key]
        self._objects[rt.key] = {}
        for key, obj in fresh.items():
            self._apply(rt, "MODIFIED" if key in old else "ADDED", obj, old.get(key))
        for key, gone in old.items():
            if key not in fresh:
                self._apply(rt, "DELETED", gone, None)
        return body["metadata"]["resourceVersion"]

    async def _watch_loop(self, rt: ResourceType, version: str) -> None:
        while True:
            try:
                params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_TIMEOUT_S)}
                async with self._async.stream("GET", self._collection(rt, None), params=params) as response:
                    if response.status_code == 410:
                        version = await self._relist(rt)
                        continue
                    if response.status_code != 200:
                        raise _error(response)
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        etype, obj = event["type"], event["object"]
                        if etype == "ERROR":
                            if obj.get("code") == 410:
                                version = await self._relist(rt)
                            break
                        version = obj["metadata"]["resourceVersion"]
                        if etype != "BOOKMARK":
                            obj.setdefault("kind", rt.kind)
                            obj.setdefault("apiVersion", rt.api_version)
                            self._apply(rt, etype, obj, None)
            except asyncio.CancelledError:
                raise
            except (httpx.HTTPError, ApiError) as exc:
                # the API server away (restarted, or etcd down): resume from the last version seen
                log.debug("watch of %s broke (%s); resuming from %s", rt.key, exc, version)
                await asyncio.sleep(RETRY_DELAY_S)

    def _apply(self, rt: ResourceType, etype: str, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        store = self._objects[rt.key]
        previous = store.get(key) if old is None else old
        if etype == "DELETED":
            store.pop(key, None)
        else:
            # a write still queued for this object stays visible over the server's older copy
            for fn in self._pending.get((rt.key, key), []):
                fn(obj)
            store[key] = obj
        try:
            self.resource_version = max(self.resource_version, int(meta.get("resourceVersion") or 0))
        except ValueError:
            pass
        if etype == "ADDED" and previous is not None:
            etype = "MODIFIED"
        for watcher in list(self._watchers[rt.key]):
            watcher._offer(etype, obj, previous)

    # -- Store's interface ---------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def iter_objects(self, rtype: str) -> Iterator[Obj]:
        return iter(list(self._objects[self._rt(rtype).key].values()))

    def caches(self, rtype: str) -> bool:
        """Whether this store keeps ``rtype`` in its cache (else it asks the API server)."""
        return self._rt(rtype).key in self._objects

    def exists(self, rtype: str, namespace: str | None, name: str) -> bool:
        rt = self._rt(rtype)
        if rt.key in self._objects:
            return self._key(rt, namespace, name) in self._objects[rt.key]
        # a type the cache does not keep (a ServiceAccount, say): the API server's word
        try:
            self.get(rtype, namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def get(self, rtype: str, namespace: str | None, name: str) -> Obj:
        rt = self._rt(rtype)
        if rt.key in self._objects:
            obj = self._objects[rt.key].get(self._key(rt, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{rt.plural} "{name}" not found')
            return copy.deepcopy(obj)
        response = self._call("GET", self._item(rt, namespace, name))
        if response.status_code != 200:
            raise _error(response)
        return response.json()

    def list(
        self, rtype: str, namespace: str | None = None, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        rt = self._rt(rtype)
        return select(self._objects[rt.key], rt, namespace, label_selector, field_selector), str(self.resource_version)

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
        """A watch on the cache (``watch.Watch``, fed by the API server's events): ADDED for what
        it holds now, then what comes. A version to resume from is not kept here: node agents
        watch from now."""
        rt = self._rt(rtype)
        match = matcher(label_selector, field_selector, rt.selectable_fields)
        w = Watch(self, rt, namespace if rt.namespaced else None, match, allow_bookmarks, read_only)  # type: ignore[arg-type]
        for obj in self._objects[rt.key].values():
            w._offer("ADDED", obj, None)
        self._watchers[rt.key].add(w)
        return w

    def close_watches(self, rtype: str | None = None) -> None:
        for key, watchers in self._watchers.items():
            if rtype is None or key == self._rt(rtype).key:
                for w in list(watchers):
                    w.close()

    def create(self, rtype: str, obj: Obj, namespace: str | None = None, *, dry_run: bool = False) -> Obj:
        rt = self._rt(rtype)
        body = copy.deepcopy(obj)
        body.setdefault("kind", rt.kind)
        body.setdefault("apiVersion", rt.api_version)
        namespace = namespace or body["metadata"].get("namespace")
        params = {"fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
        response = self._call("POST", self._collection(rt, namespace), json=body, params=params)
        if response.status_code not in (200, 201):
            raise _error(response)
        return response.json()

    def replace(self, rtype: str, obj: Obj, subresource: str | None = None, *, dry_run: bool = False) -> Obj:
        rt = self._rt(rtype)
        meta = obj["metadata"]
        params = {"fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
        response = self._call("PUT", self._item(rt, meta.get("namespace"), meta["name"], subresource or ""), json=obj, params=params)
        if response.status_code != 200:
            raise _error(response)
        return response.json()

    def delete(
        self,
        rtype: str,
        namespace: str | None,
        name: str,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
    ) -> Obj:
        rt = self._rt(rtype)
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = preconditions
        response = self._call("DELETE", self._item(rt, namespace, name), json=options)
        if response.status_code not in (200, 202):
            raise _error(response)
        return response.json()

    def remove(self, rtype: str, namespace: str | None, name: str) -> None:
        """The node agent is done with a deleting pod: it goes now (grace 0, this uid only)."""
        rt = self._rt(rtype)
        current = self._objects.get(rt.key, {}).get(self._key(rt, namespace, name))
        preconditions = {"uid": current["metadata"]["uid"]} if current else None
        try:
            self.delete(rtype, namespace, name, grace_period_seconds=0, preconditions=preconditions)
        except ApiError as exc:
            if exc.code in TRANSIENT:
                # the server away: the pod is still to go once it answers (its containers have stopped)
                self._in_background(self._remove_later(rtype, namespace, name, preconditions))
            elif exc.code not in (404, 409):
                raise

    async def _remove_later(self, rtype: str, namespace: str | None, name: str, preconditions: dict | None) -> None:
        while True:
            await asyncio.sleep(RETRY_DELAY_S)
            try:
                await asyncio.to_thread(self.delete, rtype, namespace, name, 0, None, preconditions)
                return
            except ApiError as exc:
                if exc.code not in TRANSIENT:
                    return  # gone already (404), or another pod of that name now (409)

    def _in_background(self, coro: Any) -> None:
        if self._stopped:  # the client is closed: a late event or removal has nowhere to go
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def mutate(self, rtype: str, namespace: str | None, name: str, fn: Callable[[Obj], Any]) -> Obj:
        """Apply ``fn`` to the cached object now and to the server's in the background (status
        for pods and nodes, the object otherwise)."""
        rt = self._rt(rtype)
        key = self._key(rt, namespace, name)
        current = self._objects[rt.key].get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{rt.plural} "{name}" not found')
        new = copy.deepcopy(current)
        fn(new)
        self._objects[rt.key][key] = new
        pending = self._pending.setdefault((rt.key, key), [])
        pending.append(fn)
        if (rt.key, key) not in self._writers and not self._stopped:
            self._writers[(rt.key, key)] = asyncio.get_running_loop().create_task(self._write(rt, key))
        for watcher in list(self._watchers[rt.key]):
            watcher._offer("MODIFIED", new, current)
        return copy.deepcopy(new)

    async def _write(self, rt: ResourceType, key: Key) -> None:
        namespace, name = key
        item = self._item(rt, namespace or None, name)
        has_status = "status" in rt.subresources or rt.kind in ("Pod", "Node")
        conflicts = 0
        wait = False
        try:
            while conflicts < WRITE_TRIES:
                if wait:
                    await asyncio.sleep(RETRY_DELAY_S)
                    wait = False
                fns = list(self._pending.get((rt.key, key), []))
                if not fns:
                    return
                try:
                    async with self._in_flight:
                        response = await self._async.get(item)
                        if response.status_code == 404:
                            return
                        if response.status_code in TRANSIENT:
                            wait = True  # outside the bound: a wait holds no request's place
                            continue
                        if response.status_code != 200:
                            raise _error(response)
                        before = response.json()
                        after = copy.deepcopy(before)
                        for fn in fns:
                            try:
                                fn(after)
                            except ApiError as exc:
                                # a change that no longer applies (the pod there now is a newer
                                # one of the same name) is dropped with the rest once written;
                                # raised, it ended the task with its change still queued, and
                                # the next task met it again, forever
                                log.debug("a queued change to %s %s/%s no longer applies: %s", rt.key, namespace, name, exc.message)
                        response = None
                        # the object itself (metadata, spec) and its status are separate writes
                        if not has_status or {k: v for k, v in after.items() if k != "status"} != {
                            k: v for k, v in before.items() if k != "status"
                        }:
                            response = await self._async.put(item, json=after, params={"fieldValidation": "Strict"})
                            if response.status_code == 200 and has_status:
                                after["metadata"]["resourceVersion"] = response.json()["metadata"]["resourceVersion"]
                        if has_status and after.get("status") != before.get("status") and (response is None or response.status_code == 200):
                            response = await self._async.put(f"{item}/status", json=after, params={"fieldValidation": "Strict"})
                except httpx.HTTPError as exc:
                    log.debug("write of %s %s/%s waits for the API server: %s", rt.key, namespace, name, exc)
                    await asyncio.sleep(RETRY_DELAY_S)
                    continue
                if response is not None and response.status_code == 409:
                    conflicts += 1
                    continue
                if response is not None and response.status_code == 404:
                    return
                if response is not None and response.status_code in TRANSIENT:
                    log.debug("write of %s %s/%s waits for the API server: HTTP %d", rt.key, namespace, name, response.status_code)
                    await asyncio.sleep(RETRY_DELAY_S)
                    continue
                if response is not None and response.status_code != 200:
                    log.warning("the API server refused %s %s/%s: %s", rt.key, namespace, name, _error(response).message)
                    return
                del self._pending[(rt.key, key)][: len(fns)]
            log.warning("gave up writing %s %s/%s after %d conflicts", rt.key, namespace, name, WRITE_TRIES)
            self._pending.pop((rt.key, key), None)
        finally:
            self._writers.pop((rt.key, key), None)
            if self._pending.get((rt.key, key)) and not self._stopped:
                self._writers[(rt.key, key)] = asyncio.get_running_loop().create_task(self._write(rt, key))
            else:
                self._pending.pop((rt.key, key), None)

    def record_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "kubelet",
        *,
        scheduler_style: bool = False,
        host: str | None = None,
        field_path: str | None = None,
        action: str | None = None,
        remote: bool = False,
    ) -> Obj:
        """Post a core/v1 Event about ``involved`` (``eventviews.recorded_event``), in the background."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        event = eventviews.recorded_event(
            involved,
            f"{meta.get('name')}.{time.time_ns():x}",
            reason,
            message,
            type,
            component,
            scheduler_style=scheduler_style,
            host=host,
            field_path=field_path,
            action=action,
            now=self.now(),
            remote=remote,
        )
        event.update({"apiVersion": "v1", "kind": "Event"})
        self._in_background(self._post_event(namespace, event))
        return event

    async def _post_event(self, namespace: str, event: Obj) -> None:
        try:
            async with self._in_flight:
                response = await self._async.post(self._collection(resource("events"), namespace), json=event)
            if response.status_code not in (200, 201):
                log.warning("event %s dropped: %s", event["reason"], _error(response).message)
        except httpx.HTTPError as exc:
            log.debug("event %s dropped: %s", event["reason"], exc)
