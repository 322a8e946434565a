"""WatchFeed resumes from the last resourceVersion, follows bookmarks, relists only on 410."""

from __future__ import annotations

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.hub.capacity.watch import WatchFeed, object_key
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import wait_until


class Seen:
    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}

    def __call__(self, event_type, obj) -> None:
        if event_type == "DELETED":
            self.objects.pop(object_key(obj), None)
        else:
            self.objects[object_key(obj)] = obj


def add_pod(store: Store, name: str) -> None:
    pod = synthetic.pod(name, namespace="default")
    pod.pop("status")
    store.create("pods", pod)


async def test_watch_timeouts_and_drops_resume_without_listing(api_server):
    store, server, core = api_server
    seen = Seen()
    feed = WatchFeed(core.list_pod_for_all_namespaces, seen, kind="pods", timeout_seconds=1)
    await feed.start()
    try:
        add_pod(store, "a")
        await wait_until(lambda: "default/a" in seen.objects, 5, "first event")
        await wait_until(lambda: feed.resumes >= 2, 10, "two watch timeouts")
        server.drop_watches()  # a dropped stream: what happened meanwhile must still arrive
        add_pod(store, "b")
        store.delete("pods", "default", "a", grace_period_seconds=0)
        await wait_until(lambda: set(seen.objects) == {"default/b"}, 10, "events after the drop")
    finally:
        await feed.stop()
    assert feed.relists == 1 and server.stats["list"] == 1
    assert server.stats["watch"] >= 3


async def test_410_gone_makes_it_list_once_and_catch_up(api_server):
    store, server, core = api_server
    seen = Seen()
    feed = WatchFeed(core.list_pod_for_all_namespaces, seen, kind="pods", timeout_seconds=30)
    await feed.start()
    try:
        add_pod(store, "a")
        await wait_until(lambda: "default/a" in seen.objects, 5, "first event")
        # compaction past what the client saw, then a drop: the resume gets 410 Gone. The write
        # after the compaction puts the list the client then makes beyond it, as on a real API
        # server, whose lists are served from the current state; before, the list's own version
        # was expired too, and the client relisted until the test lifted the compaction.
        store.delete("pods", "default", "a", grace_period_seconds=0)
        server.drop_watches()
        server.faults.expire_history(store.resource_version + 1)
        add_pod(store, "c")
        await wait_until(lambda: feed.relists == 2, 10, "a relist after 410")
        await wait_until(lambda: set(seen.objects) == {"default/c"}, 5, "state after the relist")
        server.faults.expired_below = 0
        add_pod(store, "d")
        await wait_until(lambda: "default/d" in seen.objects, 5, "watching again")
    finally:
        await feed.stop()
    assert feed.relists == 2 and server.stats["list"] == 2


async def test_bookmarks_move_the_resume_point_so_a_quiet_watch_is_not_expired(api_server):
    store, server, core = api_server
    server.bookmark_interval_s = 0.2
    seen = Seen()
    feed = WatchFeed(core.list_pod_for_all_namespaces, seen, kind="pods", timeout_seconds=30)
    await feed.start()
    try:
        add_pod(store, "a")
        await wait_until(lambda: "default/a" in seen.objects, 5, "first event")
        last_pod_version = feed.resource_version
        # the cluster moves on without touching pods: only bookmarks tell the watch
        for i in range(5):
            store.create("nodes", synthetic.node(f"n{i}", {}))
        await wait_until(lambda: feed.bookmarks >= 1 and int(feed.resource_version) >= store.resource_version, 5, "a bookmark")
        assert int(feed.resource_version) > int(last_pod_version)
        # history before the nodes is compacted; the bookmarked version is still served
        server.faults.expire_history(store.resource_version)
        server.drop_watches()
        add_pod(store, "b")
        await wait_until(lambda: "default/b" in seen.objects, 5, "resumed from the bookmark")
    finally:
        await feed.stop()
    assert feed.relists == 1, "a bookmark's version must be enough to resume"
