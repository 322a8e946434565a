"""Watch streams as kube-apiserver serves them: events written as they come (encoded once for
every plain watcher), bookmarks, timeouts, a too-old version reported in-stream, and the faults'
dropped streams. A part of ``ApiServer``."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim import tables
from jupyter_gpuburst.sim.apiwire import JSON, dumps, int_param, truthy, wants_table
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.resources import ResourceType
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.watch import Watch

Obj = dict[str, Any]
# How long an idle watch waits before checking its deadline, client and bookmark needs.
_WATCH_TICK_S = 1.0


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
        line = (dumps({"type": etype, "object": obj}) + "\n").encode()
        self._lines[key] = (obj, line)
        if len(self._lines) > self.size:
            self._lines.popitem(last=False)
        return line


class WatchStreams:
    """Serves the watch requests of an ``ApiServer`` (which it is a part of)."""

    # the server's own (apiserver.ApiServer)
    store: Store
    faults: Faults
    stats: Counter[str]
    bookmark_interval_s: float
    _streams: set[Watch]
    _encoded: EncodedEvents

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
        timeout = int_param(q, "timeoutSeconds")
        bookmarks = truthy(q.get("allowWatchBookmarks"))
        table = wants_table(request)
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
            await response.write((dumps({"type": "ERROR", "object": err.status()}) + "\n").encode())
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
                    await response.write((dumps({"type": etype, "object": obj}) + "\n").encode())
                last_write = time.monotonic()
                sent += 1
                if self.faults.drop_watch_after is not None and sent >= self.faults.drop_watch_after:
                    break  # the injected drop: end the stream mid-watch
        except ConnectionResetError:
            # the client went (a hub killed) between the check above and the write: nothing to
            # report, as kube-apiserver reports nothing of a watcher that hung up
            return response
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
