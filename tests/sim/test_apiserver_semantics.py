"""kube-apiserver semantics a client can tell apart: paging, DELETE answers, apply, stringData,
events.k8s.io/v1 watches (over HTTP, against the emulated API server)."""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
import pytest

from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.store import Store


@pytest.fixture
async def small_history():
    """An API server whose watch history holds only a few versions, so tokens expire fast."""
    server = ApiServer(Store(history_size=5))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def call(server: ApiServer, method: str, path: str, body=None, content_type: str = "application/json", **query) -> tuple[int, dict]:
    data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, server.url + path, data=data, params=query, headers={"Content-Type": content_type}) as r,
    ):
        return r.status, await r.json(content_type=None)


def configmap(name: str, **data) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_paging_tokens_and_expiry(small_history):
    server = small_history
    for i in range(5):
        server.store.create("configmaps", configmap(f"cm-{i}"), "default")
    code, first = await call(server, "GET", "/api/v1/namespaces/default/configmaps", limit="2")
    assert code == 200 and [c["metadata"]["name"] for c in first["items"]] == ["cm-0", "cm-1"]
    assert first["metadata"]["remainingItemCount"] == 3
    token, list_rv = first["metadata"]["continue"], first["metadata"]["resourceVersion"]
    server.store.create("configmaps", configmap("cm-00"), "default")  # sorts before the token: not in later pages
    code, second = await call(server, "GET", "/api/v1/namespaces/default/configmaps", limit="2", **{"continue": token})
    assert [c["metadata"]["name"] for c in second["items"]] == ["cm-2", "cm-3"]
    assert second["metadata"]["resourceVersion"] == list_rv
    code, err = await call(server, "GET", "/api/v1/namespaces/default/configmaps", limit="2", resourceVersion="1", **{"continue": token})
    assert code == 400 and "not allowed when using continue" in err["message"]
    for i in range(6):  # push the first chunk's version out of the history
        server.store.create("configmaps", configmap(f"later-{i}"), "default")
    code, expired = await call(server, "GET", "/api/v1/namespaces/default/configmaps", limit="2", **{"continue": token})
    assert code == 410 and expired["reason"] == "Expired" and expired["metadata"]["continue"]
    code, resumed = await call(
        server, "GET", "/api/v1/namespaces/default/configmaps", limit="100", **{"continue": expired["metadata"]["continue"]}
    )
    assert code == 200 and resumed["items"][0]["metadata"]["name"] == "cm-2"
    code, bad = await call(server, "GET", "/api/v1/namespaces/default/configmaps", limit="2", **{"continue": "garbage"})
    assert code == 400 and bad["message"].startswith("continue key is not valid")


async def test_delete_answers_per_registry(apiserver):
    apiserver.store.create("configmaps", configmap("c"), "default")
    code, status = await call(apiserver, "DELETE", "/api/v1/namespaces/default/configmaps/c")
    assert code == 200 and status["kind"] == "Status" and status["details"]["kind"] == "configmaps"
    apiserver.store.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}, "default")
    code, obj = await call(apiserver, "DELETE", "/api/v1/namespaces/default/serviceaccounts/sa")
    assert obj["kind"] == "ServiceAccount"
    apiserver.store.create("configmaps", {**configmap("held"), "metadata": {"name": "held", "finalizers": ["x/y"]}}, "default")
    code, held = await call(apiserver, "DELETE", "/api/v1/namespaces/default/configmaps/held")
    assert held["kind"] == "ConfigMap" and held["metadata"]["deletionTimestamp"]


async def test_secret_string_data_on_create_and_replace(apiserver):
    code, created = await call(
        apiserver,
        "POST",
        "/api/v1/namespaces/default/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}},
    )
    assert code == 201 and created["data"] == {"k": base64.b64encode(b"v").decode()} and "stringData" not in created
    created["stringData"] = {"k": "w"}
    code, replaced = await call(apiserver, "PUT", "/api/v1/namespaces/default/secrets/s", created)
    assert replaced["data"]["k"] == base64.b64encode(b"w").decode() and "stringData" not in replaced


async def test_apply_create_conflict_force_and_shared_values(apiserver):
    path = "/api/v1/namespaces/default/configmaps/a"
    yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: '1'\n  y: '2'\n"
    code, err = await call(apiserver, "PATCH", path, yaml_body, "application/apply-patch+yaml")
    assert code == 400 and "fieldManager" in err["message"]
    code, created = await call(apiserver, "PATCH", path, yaml_body, "application/apply-patch+yaml", fieldManager="one")
    assert code == 201 and created["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {"f:x": {}, "f:y": {}}}
    # the same value is shared ownership, not a conflict
    code, shared = await call(
        apiserver,
        "PATCH",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1"}},
        "application/apply-patch+yaml",
        fieldManager="two",
    )
    assert code == 200 and {m["manager"] for m in shared["metadata"]["managedFields"]} == {"one", "two"}
    code, conflict = await call(
        apiserver,
        "PATCH",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"y": "3"}},
        "application/apply-patch+yaml",
        fieldManager="two",
    )
    assert code == 409 and conflict["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "one" using v1', "field": ".data.y"}
    ]
    # objects written without apply belong to before-first-apply
    apiserver.store.create("configmaps", configmap("plain", k="v"), "default")
    code, conflict = await call(
        apiserver,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/plain",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"k": "w"}},
        "application/apply-patch+yaml",
        fieldManager="three",
    )
    assert code == 409 and 'conflict with "before-first-apply"' in conflict["message"]
    code, forced = await call(
        apiserver,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/plain",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"k": "w"}},
        "application/apply-patch+yaml",
        fieldManager="three",
        force="true",
    )
    assert code == 200 and forced["data"] == {"k": "w"}
    code, wrong = await call(
        apiserver,
        "PATCH",
        path,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}},
        "application/apply-patch+yaml",
        fieldManager="one",
    )
    assert code == 400


async def test_events_v1_watch_converts_core_events(apiserver):
    store = apiserver.store
    rv = str(store.resource_version)
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            apiserver.url + "/apis/events.k8s.io/v1/namespaces/default/events",
            params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "5"},
        ) as r,
    ):
        assert r.status == 200
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "u"}}
        store.record_event(pod, "Started", "Started container c", host="n")
        event = json.loads(await asyncio.wait_for(r.content.readline(), 5))
    assert event["type"] == "ADDED"
    obj = event["object"]
    assert obj["apiVersion"] == "events.k8s.io/v1" and obj["note"] == "Started container c" and obj["regarding"]["name"] == "p"
