"""The emulated API server driven by the official Kubernetes Python clients, unmodified."""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client.rest import ApiException

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.faults import Faults


def sync_client(url: str) -> kubernetes.client.ApiClient:
    config = kubernetes.client.Configuration()
    config.host = url
    return kubernetes.client.ApiClient(config)


def pod_manifest(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "nb"}},
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "jupyter/base:1.0",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"name": "notebook-port", "containerPort": 8888}],
                }
            ]
        },
    }


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


async def test_crud_patch_and_status_bodies(apiserver):
    def run():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            created = core.create_namespaced_pod("default", pod_manifest("nb"))
            assert created.status.phase == "Pending" and created.metadata.uid
            assert created.spec.scheduler_name == "default-scheduler"
            with pytest.raises(ApiException) as err:
                core.create_namespaced_pod("default", pod_manifest("nb"))
            assert err.value.status == 409
            assert status_of(err.value)["reason"] == "AlreadyExists"
            assert status_of(err.value)["message"] == 'pods "nb" already exists'
            with pytest.raises(ApiException) as err:
                core.read_namespaced_pod("missing", "default")
            assert err.value.status == 404 and status_of(err.value)["message"] == 'pods "missing" not found'
            with pytest.raises(ApiException) as err:
                core.create_namespaced_pod("default", {"metadata": {"name": "bad"}, "spec": {"containers": []}})
            assert err.value.status == 422 and status_of(err.value)["details"]["causes"][0]["field"] == "spec.containers"
            with pytest.raises(ApiException) as err:
                core.list_namespaced_pod("default", field_selector="spec.bogus=1")
            assert err.value.status == 400 and status_of(err.value)["message"] == "field label not supported: spec.bogus"

            # Strategic merge (the client's default for dict bodies): env merges by name.
            patched = core.patch_namespaced_pod(
                "nb",
                "default",
                {
                    "metadata": {"labels": {"tier": "gpu"}},
                    "spec": {"containers": [{"name": "notebook", "env": [{"name": "B", "value": "2"}]}]},
                },
                _content_type="application/strategic-merge-patch+json",
            )
            assert [e.name for e in patched.spec.containers[0].env] == ["A", "B"]
            assert patched.metadata.labels == {"app": "nb", "tier": "gpu"}
            # JSON merge patch: lists replaced whole, null deletes.
            merged = core.patch_namespaced_pod(
                "nb", "default", {"metadata": {"labels": {"tier": None}}}, _content_type="application/merge-patch+json"
            )
            assert merged.metadata.labels == {"app": "nb"}
            # JSON patch (a list body).
            jp = core.patch_namespaced_pod(
                "nb",
                "default",
                [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}],
                _content_type="application/json-patch+json",
            )
            assert jp.metadata.annotations == {"k": "v"}
            assert int(jp.metadata.resource_version) > int(created.metadata.resource_version)

            stale = core.read_namespaced_pod("nb", "default")
            stale.metadata.resource_version = created.metadata.resource_version
            with pytest.raises(ApiException) as err:
                core.replace_namespaced_pod("nb", "default", stale)
            assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"

            listed = core.list_namespaced_pod("default", label_selector="app in (nb),!missing")
            assert [p.metadata.name for p in listed.items] == ["nb"]
            assert int(listed.metadata.resource_version) >= int(jp.metadata.resource_version)
            core.delete_namespaced_pod("nb", "default", grace_period_seconds=5)
            assert core.list_namespaced_pod("default").items == []

    await asyncio.to_thread(run)


async def test_binding_subresource_and_events(apiserver):
    apiserver.store.create("pods", pod_manifest("nb"))

    def run():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            binding = kubernetes.client.V1Binding(
                metadata=kubernetes.client.V1ObjectMeta(name="nb"), target=kubernetes.client.V1ObjectReference(kind="Node", name="gpu-1")
            )
            reply = core.create_namespaced_pod_binding("nb", "default", binding, _preload_content=False)
            assert reply.status == 201 and json.loads(reply.data)["status"] == "Success"
            pod = core.read_namespaced_pod("nb", "default")
            assert pod.spec.node_name == "gpu-1"
            events = core.list_namespaced_event("default", field_selector="involvedObject.name=nb,involvedObject.kind=Pod")
            assert [(e.reason, e.message) for e in events.items] == [("Scheduled", "Successfully assigned default/nb to gpu-1")]
            # Graceful delete of a scheduled pod: still there, marked, until the kubelet removes it.
            core.delete_namespaced_pod("nb", "default", body=kubernetes.client.V1DeleteOptions(grace_period_seconds=30))
            assert core.read_namespaced_pod("nb", "default").metadata.deletion_timestamp is not None

    await asyncio.to_thread(run)
    apiserver.store.remove("pods", "default", "nb")


async def test_watch_resumes_after_dropped_connection(apiserver):
    """Conformance (c): the stream ends every 2 events; Watch.stream resumes without losing any."""
    apiserver.faults = Faults(drop_watch_after=2)
    total = 7
    received: list[tuple[str, str]] = []
    started = threading.Event()

    def consume():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            rv = core.list_namespaced_pod("default").metadata.resource_version
            watcher = kubernetes.watch.Watch()
            started.set()
            for event in watcher.stream(core.list_namespaced_pod, "default", resource_version=rv):
                received.append((event["type"], event["object"].metadata.name))
                if len(received) == total:
                    watcher.stop()

    consumer = asyncio.create_task(asyncio.to_thread(consume))
    await asyncio.to_thread(started.wait, 5)
    for i in range(5):
        apiserver.store.create("pods", pod_manifest(f"p{i}"))
        await asyncio.sleep(0.05)
    apiserver.store.delete("pods", "default", "p0")
    apiserver.store.delete("pods", "default", "p1")
    await asyncio.wait_for(consumer, 10)
    assert received == [("ADDED", f"p{i}") for i in range(5)] + [("DELETED", "p0"), ("DELETED", "p1")]
    assert apiserver.stats["watch"] >= 4  # the stream really was cut and reopened


async def test_watch_timeout_and_410(apiserver):
    small = apiserver.store
    small._history = type(small._history)(maxlen=3)
    for i in range(6):
        small.create("configmaps", {"metadata": {"name": f"c{i}"}})

    async with aiohttp.ClientSession() as session:
        async with session.get(
            f"{apiserver.url}/api/v1/namespaces/default/configmaps", params={"watch": "True", "resourceVersion": "1"}
        ) as resp:
            assert resp.status == 200
            events = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    assert events[0]["object"]["message"].startswith("too old resource version: 1 (")

    def timed():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            return list(kubernetes.watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=1))

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    initial = await asyncio.to_thread(timed)
    assert 0.9 <= loop.time() - t0 < 5
    assert sorted(e["object"].metadata.name for e in initial) == [f"c{i}" for i in range(6)]


async def test_kubernetes_asyncio_reflector_pattern(apiserver):
    """What KubeSpawner's reflector does: list at rv=0 NotOlderThan, then watch with a timeout."""
    apiserver.store.create("pods", pod_manifest("before", {"component": "singleuser-server"}))
    config = kubernetes_asyncio.client.Configuration(host=apiserver.url)
    async with kubernetes_asyncio.client.ApiClient(config) as api_client:
        core = kubernetes_asyncio.client.CoreV1Api(api_client)
        listed = await core.list_namespaced_pod(
            "default",
            label_selector="component=singleuser-server",
            resource_version="0",
            resource_version_match="NotOlderThan",
            _request_timeout=5,
        )
        assert [p.metadata.name for p in listed.items] == ["before"]

        async def later():
            await asyncio.sleep(0.2)
            apiserver.store.create("pods", pod_manifest("other", {"component": "other"}))
            apiserver.store.create("pods", pod_manifest("after", {"component": "singleuser-server"}))

        writer = asyncio.create_task(later())
        seen = []
        watch = kubernetes_asyncio.watch.Watch()
        t0 = asyncio.get_running_loop().time()
        async with watch.stream(
            core.list_namespaced_pod,
            "default",
            label_selector="component=singleuser-server",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=2,
        ) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"].metadata.name))
        await writer
        elapsed = asyncio.get_running_loop().time() - t0
    assert seen == [("ADDED", "after")]
    assert 1.5 <= elapsed < 6  # the server closed the stream at timeoutSeconds


async def test_discovery_and_access_review(apiserver):
    apiserver.denied.add(("create", "", "namespaces"))

    def run():
        with sync_client(apiserver.url) as api_client:
            version = kubernetes.client.VersionApi(api_client).get_code()
            assert version.git_version.startswith("v1.") and version.minor
            groups = {g.name for g in kubernetes.client.ApisApi(api_client).get_api_versions().groups}
            assert {liqo.OFFLOADING_GROUP, "authorization.k8s.io", "events.k8s.io"} <= groups
            resources = {r.name: r for r in kubernetes.client.CoreV1Api(api_client).get_api_resources().resources}
            assert resources["pods"].namespaced and "watch" in resources["pods"].verbs and "pods/binding" in resources
            authz = kubernetes.client.AuthorizationV1Api(api_client)

            def allowed(verb, resource):
                review = {"spec": {"resourceAttributes": {"verb": verb, "group": "", "resource": resource, "namespace": "default"}}}
                return authz.create_self_subject_access_review(review).status.allowed

            assert allowed("create", "pods") is True
            assert allowed("create", "namespaces") is False
            custom = kubernetes.client.CustomObjectsApi(api_client)
            nso = custom.create_namespaced_custom_object(
                liqo.OFFLOADING_GROUP,
                liqo.OFFLOADING_VERSION,
                "default",
                liqo.NAMESPACE_OFFLOADING_PLURAL,
                {
                    "apiVersion": liqo.OFFLOADING_API_VERSION,
                    "kind": liqo.NAMESPACE_OFFLOADING_KIND,
                    "metadata": {"name": "offloading"},
                    "spec": {"podOffloadingStrategy": "Remote"},
                },
            )
            assert nso["metadata"]["generation"] == 1
            patched = custom.patch_namespaced_custom_object(
                liqo.OFFLOADING_GROUP,
                liqo.OFFLOADING_VERSION,
                "default",
                liqo.NAMESPACE_OFFLOADING_PLURAL,
                liqo.NAMESPACE_OFFLOADING_NAME,
                {"spec": {"podOffloadingStrategy": "Local"}},
            )
            assert patched["spec"]["podOffloadingStrategy"] == "Local" and patched["metadata"]["generation"] == 2

    await asyncio.to_thread(run)


async def test_injected_errors(apiserver):
    apiserver.faults = Faults(error_rate_500=1.0, seed=1)

    def run():
        with sync_client(apiserver.url) as api_client:
            with pytest.raises(ApiException) as err:
                kubernetes.client.CoreV1Api(api_client).list_namespace()
            return err.value

    err = await asyncio.to_thread(run)
    assert err.status == 500 and status_of(err)["reason"] == "InternalError"


async def test_bookmarks_only_when_asked(apiserver):
    apiserver.bookmark_interval_s = 0.2

    async def collect(params: dict) -> list[dict]:
        async with aiohttp.ClientSession() as session:
            url = f"{apiserver.url}/api/v1/namespaces/default/pods"
            async with session.get(
                url, params={"watch": "true", "timeoutSeconds": "1", "resourceVersion": str(apiserver.store.resource_version), **params}
            ) as resp:
                return [json.loads(line) for line in (await resp.text()).splitlines()]

    plain = await collect({})
    with_bookmarks = await collect({"allowWatchBookmarks": "true"})
    assert plain == []
    assert with_bookmarks and {e["type"] for e in with_bookmarks} == {"BOOKMARK"}
    assert with_bookmarks[0]["object"]["metadata"]["resourceVersion"] == str(apiserver.store.resource_version)


async def test_status_subresource_and_dry_run(apiserver):
    apiserver.store.create("pods", pod_manifest("nb"))

    def run():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            # Status written through the main resource is ignored, through /status it lands.
            core.patch_namespaced_pod("nb", "default", {"status": {"phase": "Running"}}, _content_type="application/merge-patch+json")
            assert core.read_namespaced_pod("nb", "default").status.phase == "Pending"
            core.patch_namespaced_pod_status(
                "nb", "default", {"status": {"phase": "Running", "podIP": "127.0.0.5"}}, _content_type="application/merge-patch+json"
            )
            pod = core.read_namespaced_pod("nb", "default")
            assert (pod.status.phase, pod.status.pod_ip) == ("Running", "127.0.0.5")
            dry = core.create_namespaced_pod("default", pod_manifest("ghost"), dry_run="All")
            assert dry.metadata.uid and dry.status.phase == "Pending"
            assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["nb"]

    await asyncio.to_thread(run)


async def test_log_subresource_delete_collection_and_quantities(apiserver, tmp_path):
    log_file = tmp_path / "nb.log"
    log_file.write_text("starting\nlistening on 8888\n")
    apiserver.log_reader = lambda ns, name, container, previous: log_file if (ns, name, previous) == ("default", "nb", False) else None
    apiserver.store.create("pods", pod_manifest("nb"))
    apiserver.store.create("pods", pod_manifest("waiting"))

    def run():
        with sync_client(apiserver.url) as api_client:
            core = kubernetes.client.CoreV1Api(api_client)
            assert core.read_namespaced_pod_log("nb", "default") == "starting\nlistening on 8888\n"
            assert core.read_namespaced_pod_log("nb", "default", tail_lines=1) == "listening on 8888\n"
            with pytest.raises(ApiException) as err:
                core.read_namespaced_pod_log("waiting", "default")
            assert err.value.status == 400 and "is waiting to start" in status_of(err.value)["message"]
            patched = core.patch_namespaced_pod(
                "nb",
                "default",
                {"spec": {"containers": [{"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
                _content_type="application/strategic-merge-patch+json",
            )
            assert patched.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
            core.delete_collection_namespaced_pod("default", label_selector="app=nb")
            return core.list_namespaced_pod("default").items

    assert await asyncio.to_thread(run) == []


async def test_stop_ends_open_watches_promptly(apiserver):
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{apiserver.url}/api/v1/pods", params={"watch": "1"}) as resp:
            assert resp.status == 200
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await apiserver.stop()
            body = await asyncio.wait_for(resp.read(), 5)
            assert loop.time() - t0 < 3
    assert body == b""  # no pods: the stream ended without events


async def test_http_edge_cases(apiserver):
    apiserver.store.create("pods", pod_manifest("nb"))
    base = f"{apiserver.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as session:
        async with session.get(base, params={"resourceVersion": "1", "resourceVersionMatch": "Exact"}) as resp:
            assert resp.status == 410 and (await resp.json())["reason"] == "Expired"
        async with session.get(base, params={"resourceVersion": "0", "resourceVersionMatch": "Newest"}) as resp:
            assert resp.status == 400
        async with session.get(
            base, params={"resourceVersion": "0", "resourceVersionMatch": "NotOlderThan", "labelSelector": "", "fieldSelector": ""}
        ) as resp:
            listed = await resp.json()
            assert listed["kind"] == "PodList" and [p["metadata"]["name"] for p in listed["items"]] == ["nb"]
            assert listed["metadata"]["resourceVersion"] == str(apiserver.store.resource_version)
        async with session.get(base, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}) as resp:
            table = await resp.json()
            assert table["kind"] == "Table" and table["rows"][0]["cells"][:3] == ["nb", "0/1", "Pending"]
        async with session.get(f"{apiserver.url}/api/v1/namespaces/default/widgets") as resp:
            assert resp.status == 404 and (await resp.json())["kind"] == "Status"
        async with session.post(base, data=b"{not json", headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400 and (await resp.json())["reason"] == "BadRequest"
        async with session.post(f"{apiserver.url}/api/v1/namespaces/nowhere/pods", json=pod_manifest("x")) as resp:
            assert resp.status == 404 and (await resp.json())["message"] == 'namespaces "nowhere" not found'
        async with session.get(f"{apiserver.url}/openapi/v3") as resp:
            url = (await resp.json())["paths"]["api/v1"]["serverRelativeURL"]
        async with session.get(f"{apiserver.url}{url}") as resp:
            patch_op = (await resp.json())["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
            assert patch_op["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
            assert "fieldValidation" in [p["name"] for p in patch_op["parameters"]]
