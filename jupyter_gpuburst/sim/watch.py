"""An open watch on the events of one resource type, with kube-apiserver's filtering rules.

The emulator's ``Store`` and the real control plane's cache (``kube.remotestore``) both hand
these out and feed them every event of the type (``_offer``)."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from jupyter_gpuburst.sim.resources import ResourceType

Obj = dict[str, Any]


class WatchSource(Protocol):
    """What hands out watches: the version a bookmark names, and the open watches by type."""

    resource_version: int
    _watchers: Any  # resource type key -> set of open Watch


class Watch:
    """An open watch: an async iterator of ``(event_type, object)``.

    Events are filtered by namespace and selectors with the API server's enter/leave rule: an
    object that stops matching yields DELETED, one that starts matching yields ADDED. Closing
    ends the iteration; the store closes watches only on :meth:`Store.close_watches`.
    """

    def __init__(
        self,
        store: WatchSource,
        rtype: ResourceType,
        namespace: str | None,
        match: Callable[[Obj], bool],
        allow_bookmarks: bool,
        read_only: bool = False,
    ):
        self._store = store
        self._read_only = read_only
        self.rtype = rtype
        self.namespace = namespace
        self._match = match
        self.allow_bookmarks = allow_bookmarks
        self._queue: deque[tuple[str, Obj]] = deque()
        self._ready = asyncio.Event()
        self.closed = False

    def _offer(self, etype: str, obj: Obj, old: Obj | None) -> None:
        if self.closed:
            return
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return
        now = self._match(obj)
        if etype == "MODIFIED" and old is not None:
            before = self._match(old)
            if before and not now:
                etype, now = "DELETED", True
            elif now and not before:
                etype = "ADDED"
        if now:
            self._queue.append((etype, obj))
            self._ready.set()

    def bookmark(self) -> tuple[str, Obj]:
        """A BOOKMARK event at the store's current version (send only when the client asked)."""
        rt = self.rtype
        return "BOOKMARK", {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self._store.resource_version)},
        }

    async def next(self, timeout: float | None = None) -> tuple[str, Obj] | None:
        """The next event, or None on timeout or when closed."""
        while not self._queue:
            if self.closed:
                return None
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        etype, obj = self._queue.popleft()
        return etype, obj if self._read_only else copy.deepcopy(obj)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, Obj]:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    def close(self) -> None:
        """Stop the watch; a pending ``next`` returns None once the queue is drained."""
        if not self.closed:
            self.closed = True
            self._queue.clear()
            self._ready.set()
            self._store._watchers[self.rtype.key].discard(self)
