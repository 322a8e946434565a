"""The node agents' store over a real API server that goes away (sim/kube/remotestore.py), with
the server's answers scripted: a watch broken by a lost connection resumes from its version, one
answered 410 Gone lists again, a queued write meets 5xx answers and lands, a blocking call that
cannot connect is a 503 ``ApiError``, and a pod removal waits for the server to come back."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube.pki import Pki
from jupyter_gpuburst.sim.kube.remotestore import IN_FLIGHT, RemoteStore
from jupyter_gpuburst.sim.testing import wait_until

URL = "https://api.test"


def configmap(name: str, version: str, value: str = "1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version, "uid": f"uid-{name}"},
        "data": {"v": value},
    }


@pytest.fixture
def store(tmp_path):
    pki = Pki(tmp_path / "pki")
    client = pki.client("agent", "agent")
    return RemoteStore(URL, (str(pki.ca), str(client.cert), str(client.key)), ("configmaps",))


def script(store: RemoteStore, handler, sync_handler=None) -> None:
    store._async = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    store._sync = httpx.Client(transport=httpx.MockTransport(sync_handler or handler))


async def test_a_broken_watch_resumes_and_a_gone_one_lists_again(store):
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        watching = request.url.params.get("watch") == "1"
        seen.append(f"{'watch' if watching else 'list'} {request.url.params.get('resourceVersion', '')}")
        if not watching:
            return httpx.Response(200, json={"metadata": {"resourceVersion": "20"}, "items": [configmap("relisted", "20")]})
        watches = sum(1 for s in seen if s.startswith("watch"))
        if watches == 1:
            raise httpx.ConnectError("connection refused")  # the API server restarting
        if watches == 2:
            return httpx.Response(410, json={"kind": "Status", "code": 410, "reason": "Expired"})
        if watches == 3:
            line = json.dumps({"type": "ADDED", "object": configmap("after", "21")})
            return httpx.Response(200, content=(line + "\n").encode())
        await asyncio.sleep(30)
        return httpx.Response(200, content=b"")

    script(store, handler)
    store._objects["configmaps"][("default", "stale")] = configmap("stale", "5")
    events = store.watch("configmaps")
    task = asyncio.create_task(store._watch_loop(store._rt("configmaps"), "10"))
    try:
        await wait_until(lambda: store.exists("configmaps", "default", "after"), timeout=10, what="the watch after the relist")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # resumed from its own version after the lost connection, listed again after 410, then watched from the list's
    assert seen[:4] == ["watch 10", "watch 10", "list ", "watch 20"], seen
    assert store.exists("configmaps", "default", "relisted")
    # what went while nobody watched is deleted for the cache's own watchers too
    assert not store.exists("configmaps", "default", "stale")
    assert ("DELETED", "stale") in [(etype, obj["metadata"]["name"]) for etype, obj in events._queue]


async def test_a_queued_write_waits_through_5xx_answers_and_lands(store):
    answers = iter([504, 503])
    written: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        code = next(answers, 200)
        if request.method == "GET":
            return httpx.Response(code, json=configmap("cm", "7") if code == 200 else {"code": code, "reason": "Timeout"})
        written.append(json.loads(request.content))
        return httpx.Response(200, json=written[-1])

    script(store, handler)
    store._apply(store._rt("configmaps"), "ADDED", configmap("cm", "7"), None)
    store.mutate("configmaps", "default", "cm", lambda cm: cm["data"].update(v="2"))
    await wait_until(lambda: bool(written), timeout=10, what="the write after two 5xx answers")
    assert written[-1]["data"] == {"v": "2"}
    await store.stop()
    # stopped: a change is kept in the cache, and no writer starts on the closed client (one
    # cancelled by stop() started another, again and again, each failing on the closed client)
    store.mutate("configmaps", "default", "cm", lambda cm: cm["data"].update(v="3"))
    assert not store._writers


async def test_a_blocking_call_that_cannot_connect_is_a_503_and_a_removal_waits(store):
    tries: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        tries.append(request.method)
        if len(tries) < 3:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"kind": "Status", "status": "Success"})

    async def unused(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500)

    script(store, unused, refuse)
    with pytest.raises(ApiError) as away:
        store.create("configmaps", configmap("new", "1"))
    assert away.value.code == 503 and "not reachable" in away.value.message
    # the node agent is done with a pod: it goes once the server answers, not never
    store.remove("configmaps", "default", "done")
    await wait_until(lambda: len(tries) >= 3, timeout=10, what="the removal sent again")
    assert tries == ["POST", "DELETE", "DELETE"]
    await store.stop()


async def test_background_writes_and_events_are_bounded_in_flight(store):
    """A pod storm's Events and status writes go out at most IN_FLIGHT at a time: unbounded they
    queued by the hundred in httpx's pool, whose walk of its queue starved the node agents."""
    in_flight = peak = 0
    stored = configmap("storm", "7")

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.02)  # an API server under load
            if request.method == "GET":
                return httpx.Response(200, json=stored)
            return httpx.Response(201 if request.method == "POST" else 200, json=json.loads(request.content))
        finally:
            in_flight -= 1

    script(store, handler)
    store._objects["configmaps"][("default", "storm")] = configmap("storm", "7")
    for i in range(150):
        store.record_event(stored, "Started", f"container {i}")
    store.mutate("configmaps", "default", "storm", lambda obj: obj["data"].update(v="2"))
    await wait_until(lambda: not store._background and not store._writers, timeout=30, what="the storm sent")
    assert peak == IN_FLIGHT, f"{peak} requests at once"


async def test_a_queued_change_that_no_longer_applies_is_dropped_and_the_rest_written(store):
    """A status change queued for a pod that a newer one of the same name has replaced raises
    ApiError when applied (the kubelet's own check): it is dropped, once, and the changes queued
    with it are written."""
    stored = configmap("replaced", "7")
    requests: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request.method)
        if request.method == "GET":
            return httpx.Response(200, json=stored)
        stored.update(json.loads(request.content))
        return httpx.Response(200, json=stored)

    def for_the_old_one(obj: dict) -> None:
        raise ApiError(409, "Conflict", "a newer pod of the same name")

    script(store, handler)
    store._objects["configmaps"][("default", "replaced")] = configmap("replaced", "7")
    with pytest.raises(ApiError):
        store.mutate("configmaps", "default", "replaced", for_the_old_one)  # applied to the cache at once
    store._pending[("configmaps", ("default", "replaced"))] = [for_the_old_one]  # as if queued before the cache saw the new one
    store.mutate("configmaps", "default", "replaced", lambda obj: obj["data"].update(v="new"))
    await wait_until(lambda: not store._writers and not store._pending, timeout=10, what="the queue emptied")
    assert stored["data"]["v"] == "new"
    assert requests == ["GET", "PUT"], requests
