"""List-then-watch of one Kubernetes collection that hands every change to a callback.

KubeSpawner's ResourceReflector keeps a dict but tells nobody what changed, and it keys by
namespace (nodes have none); the inventory needs each event, so this is the same loop with a
per-event callback. Unlike the reflector it lists only when it must: a watch that ends (its
``timeoutSeconds``, a dropped connection, an API server restart) is resumed from the last
resourceVersion it saw, kept fresh by bookmarks (``allowWatchBookmarks``), as client-go's
reflector does. Only 410 Gone, the server no longer holding that version, makes it list again;
at 500,000 pods, a list every watch timeout would be most of the API server's work. A relist is
turned into the events it implies, deletions included, so the consumer never has to recount.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.hub import retry

EventCallback = Callable[[str, Mapping[str, Any]], None]


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class WatchFeed:
    """Keeps ``on_event`` informed of every object of one collection, for as long as it runs."""

    def __init__(
        self,
        list_method: Callable[..., Any],
        on_event: EventCallback,
        *,
        kind: str,
        log: logging.Logger | None = None,
        timeout_seconds: int = 300,
        request_timeout: float = 330,
        max_backoff: float = 8.0,
        list_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.list_method = list_method
        self.on_event = on_event
        self.kind = kind
        self.log = log or logging.getLogger(__name__)
        self.timeout_seconds = timeout_seconds
        self.request_timeout = request_timeout
        self.max_backoff = max_backoff
        self.list_kwargs = dict(list_kwargs or {})
        self.first_load = asyncio.get_event_loop().create_future()
        self.relists = 0
        self.resumes = 0
        self.bookmarks = 0
        self.events_seen = 0
        # the newest resourceVersion seen (list, event or bookmark): where a watch resumes
        self.resource_version = ""
        self._known: dict[str, str] = {}
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """List once (raising if that fails), then keep watching in the background."""
        await self._relist()
        self._task = asyncio.create_task(self._run(), name=f"gpuburst-watch-{self.kind}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: its failure was logged where it ended
                pass
            self._task = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _emit(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self.events_seen += 1
        try:
            self.on_event(event_type, obj)
        except Exception:  # one bad object must not end the watch for every spawn
            self.log.exception("Ignoring %s event the inventory could not apply", self.kind)

    async def _relist(self) -> str:
        response = await self.list_method(_preload_content=False, _request_timeout=self.request_timeout, **self.list_kwargs)
        raw = await response.read()
        if getattr(response, "status", 200) >= 400:
            # kubernetes_asyncio raises only for preloaded responses; this one is read raw
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = raw
            raise exc
        body = json.loads(raw)
        if not isinstance(body, dict) or "items" not in body:
            raise RuntimeError(f"listing {self.kind} returned no items: {str(body)[:200]}")
        seen: dict[str, str] = {}
        for item in body["items"]:
            key = object_key(item)
            version = (item.get("metadata") or {}).get("resourceVersion", "")
            seen[key] = version
            if self._known.get(key) != version:
                self._emit("MODIFIED" if key in self._known else "ADDED", item)
        for key in set(self._known) - set(seen):
            namespace, _, name = key.rpartition("/")
            meta = {"name": name, **({"namespace": namespace} if namespace else {})}
            self._emit("DELETED", {"metadata": meta})
        self._known = seen
        self.relists += 1
        if not self.first_load.done():
            self.first_load.set_result(None)
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return self.resource_version

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                seen = self.events_seen + self.bookmarks
                await self._watch(self.resource_version)
                self.resumes += 1  # the watch ended as watches do: resume where it stopped
                if self.events_seen + self.bookmarks > seen:
                    delay = 0.1
                    continue
                # ended at once with nothing in it: do not spin against a server shedding load
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status != 410:
                    self.log.warning("Watch of %s failed (%s); resuming in %.1fs", self.kind, retry.describe(exc), delay)
                else:
                    self.log.info("Watch of %s: resourceVersion %s is gone; relisting", self.kind, self.resource_version)
                    await self._relist_until_done()
                    continue
            except Exception as exc:  # noqa: BLE001 - a dropped connection, an API restart: watch again
                self.log.warning("Watch of %s ended (%s); resuming in %.1fs", self.kind, retry.describe(exc), delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_backoff)
            self.resumes += 1

    async def _relist_until_done(self) -> None:
        delay = 0.1
        while True:
            try:
                await self._relist()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever failed, relist again after a backoff
                self.log.warning("Relisting %s failed (%s); retrying in %.1fs", self.kind, retry.describe(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)

    async def _watch(self, version: str) -> None:
        w = watch.Watch()
        method = partial(self.list_method, _preload_content=False)
        kwargs: dict[str, Any] = dict(self.list_kwargs)
        kwargs.update(
            timeout_seconds=self.timeout_seconds,
            _request_timeout=self.request_timeout,
            allow_watch_bookmarks=True,
        )
        if version:
            kwargs["resource_version"] = version
        try:
            async with w.stream(method, **kwargs) as stream:
                async for event in stream:
                    event_type = event["type"]
                    obj = event["raw_object"]
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version:
                        self.resource_version = str(version)
                    if event_type == "BOOKMARK":
                        # nothing changed for us, but the resume point moved on
                        self.bookmarks += 1
                        continue
                    key = object_key(obj)
                    if event_type == "DELETED":
                        self._known.pop(key, None)
                    else:
                        self._known[key] = (obj.get("metadata") or {}).get("resourceVersion", "")
                    self._emit(event_type, obj)
        finally:
            w.stop()
            await w.close()


class NewEvents:
    """Reads the events KubeSpawner's event reflector received since the last read, no more.

    ``KubeSpawner.events`` sorts every event of the namespace on each call. A spawn pending on
    a donor looks for a ``FailedScheduling`` about its pod each time the pod changes and every
    half second, so 160 such spawns sorting thousands of events (they stay for the API server's
    event TTL, an hour by default, and pile up with every spawn) cost the hub more with every
    spawn it has ever made. The reflector keeps events in a dict in the order they arrived;
    this reader remembers how far it read, and the key it read last, and starts there. When
    that key is no longer where it was (events before it expired), or the dict was replaced (a
    relist), it reads everything again: an event read twice is harmless, one skipped is not.
    """

    def __init__(self) -> None:
        self._seen: Any = None  # the reflector's dict last read
        self._position = 0
        self._last_key: Any = None

    def skip_to_end(self, resources: Mapping[str, Any]) -> None:
        """Take every event received so far as read: none of them is about a pod not made yet."""
        self._seen, self._position = resources, len(resources)
        self._last_key = next(reversed(resources.keys()), None) if resources else None

    def read(self, resources: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        if resources is not self._seen:
            self._seen, self._position, self._last_key = resources, 0, None
        items: list[tuple[Any, Any]] = []
        if self._position:
            # one step back, to see that the last key read is still where it was
            items = list(itertools.islice(resources.items(), self._position - 1, None))
            if items and items[0][0] == self._last_key:
                items = items[1:]
            else:
                self._position, items = 0, []
        if not self._position:
            items = list(resources.items())
        if items:
            self._position += len(items)
            self._last_key = items[-1][0]
        return [event for _, event in items]
