"""DeleteOptions.preconditions as kube-apiserver honours them: a uid or resourceVersion the
object no longer has is 409 Conflict and deletes nothing (the store, and over HTTP through the
Kubernetes client the hub uses)."""

from __future__ import annotations

import kubernetes_asyncio
import pytest
from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store


def pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "jupyter/base:1.0"}]}}


def test_a_stale_uid_or_resource_version_deletes_nothing():
    store = Store()
    created = store.create("pods", pod("p"))
    meta = created["metadata"]
    with pytest.raises(ApiError) as stale_uid:
        store.delete("pods", "default", "p", 0, preconditions={"uid": "someone-else"})
    assert stale_uid.value.code == 409 and stale_uid.value.reason == "Conflict"
    assert f"UID in precondition: someone-else, UID in object meta: {meta['uid']}" in stale_uid.value.message
    changed = store.mutate("pods", "default", "p", lambda p: p["metadata"].setdefault("labels", {}).update(adopted="yes"))
    with pytest.raises(ApiError) as stale_rv:
        store.delete("pods", "default", "p", 0, preconditions={"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
    assert stale_rv.value.code == 409 and "ResourceVersion in precondition" in stale_rv.value.message
    assert store.exists("pods", "default", "p")
    store.delete("pods", "default", "p", 0, preconditions={"uid": meta["uid"], "resourceVersion": changed["metadata"]["resourceVersion"]})
    assert not store.exists("pods", "default", "p")


def test_preconditions_must_be_an_object():
    store = Store()
    store.create("pods", pod("p"))
    with pytest.raises(ApiError) as bad:
        store.delete("pods", "default", "p", 0, preconditions=["uid"])
    assert bad.value.code == 400 and "preconditions" in bad.value.message
    assert store.exists("pods", "default", "p")


async def test_the_hubs_client_gets_409_conflict_for_a_changed_pod(apiserver):
    meta = apiserver.store.create("pods", pod("p"))["metadata"]
    apiserver.store.mutate("pods", "default", "p", lambda p: p["metadata"].setdefault("labels", {}).update(adopted="yes"))
    config = kubernetes_asyncio.client.Configuration(host=apiserver.url)
    async with kubernetes_asyncio.client.ApiClient(config) as api_client:
        core = kubernetes_asyncio.client.CoreV1Api(api_client)
        stale = V1DeleteOptions(preconditions=V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"]))
        with pytest.raises(ApiException) as conflict:
            await core.delete_namespaced_pod("p", "default", body=stale, grace_period_seconds=0)
        assert conflict.value.status == 409 and '"reason":"Conflict"' in conflict.value.body.replace(" ", "")
        assert apiserver.store.exists("pods", "default", "p")
        await core.delete_namespaced_pod("p", "default", body=V1DeleteOptions(preconditions=V1Preconditions(uid=meta["uid"])))
        assert not apiserver.store.exists("pods", "default", "p")
