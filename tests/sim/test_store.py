"""Unit tests of the emulator's object store: versions, selectors, watch replay, deletion."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.resources import RESOURCES
from jupyter_gpuburst.sim.store import Store

NSO = f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}"


def pod(name: str, labels: dict | None = None, **spec) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "notebook", "image": "jupyter/base:1.0", **spec}]},
    }


async def drain(watch, n: int, timeout: float = 1.0) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        event = await watch.next(timeout)
        assert event is not None, f"expected {n} events, got {out}"
        out.append((event[0], event[1]["metadata"]["name"]))
    return out


def test_resource_version_is_global_and_monotonic():
    store = Store()
    seen = [int(store.create("pods", pod(f"p{i}"))["metadata"]["resourceVersion"]) for i in range(3)]
    seen.append(int(store.create("configmaps", {"metadata": {"name": "c"}})["metadata"]["resourceVersion"]))
    seen.append(
        int(
            store.mutate("pods", "default", "p0", lambda o: o["metadata"].setdefault("labels", {}).update(a="b"))["metadata"][
                "resourceVersion"
            ]
        )
    )
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    _items, rv = store.list("pods")
    assert rv == str(store.resource_version) == str(seen[-1])


def test_pod_defaults_and_errors():
    store = Store()
    created = store.create("pods", pod("gpu", resources={"limits": {"nvidia.com/gpu": 1, "cpu": "1", "memory": "1Gi"}}))
    spec = created["spec"]
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["serviceAccountName"] == "default"
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}
    assert created["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]
    with pytest.raises(ApiError) as err:
        store.create("pods", pod("gpu"))
    assert err.value.code == 409 and err.value.message == 'pods "gpu" already exists'
    with pytest.raises(ApiError) as err:
        store.create("pods", pod("x"), namespace="nope")
    assert err.value.code == 404 and err.value.message == 'namespaces "nope" not found'
    with pytest.raises(ApiError) as err:
        store.create("pods", {"metadata": {"name": "empty"}, "spec": {}})
    assert err.value.code == 422 and err.value.status()["details"]["causes"][0]["field"] == "spec.containers"
    with pytest.raises(ApiError) as err:
        store.get("pods", "default", "missing")
    assert err.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "pods"},
        "code": 404,
    }


def test_replace_conflict_on_stale_version_and_generation():
    store = Store()
    cm = store.create(NSO, {"metadata": {"name": "offloading"}, "spec": {"podOffloadingStrategy": "Local"}})
    stale = dict(cm)
    cm["spec"] = {"podOffloadingStrategy": "Remote"}
    updated = store.replace(NSO, cm)
    assert updated["metadata"]["generation"] == 2
    with pytest.raises(ApiError) as err:
        store.replace(NSO, stale)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message


def test_selectors():
    store = Store()
    store.create("pods", pod("a", {"app": "nb", "tier": "gpu"}))
    store.create("pods", pod("b", {"app": "nb"}))
    store.create("pods", pod("c", {"app": "other"}))

    def names(**kw):
        return [p["metadata"]["name"] for p in store.list("pods", **kw)[0]]

    assert names(label_selector="app=nb") == ["a", "b"]
    assert names(label_selector="app==nb,tier") == ["a"]
    assert names(label_selector="app!=nb") == ["c"]
    assert names(label_selector="app in (nb, other),!tier") == ["b", "c"]
    assert names(label_selector="app notin (nb)") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    with pytest.raises(ApiError) as err:
        store.list("pods", field_selector="spec.foo=1")
    assert err.value.code == 400 and err.value.message == "field label not supported: spec.foo"


async def test_watch_replay_from_version_and_initial_added():
    store = Store()
    store.create("pods", pod("a"))
    rv = store.resource_version
    store.create("pods", pod("b"))
    store.delete("pods", "default", "a")
    watch = store.watch("pods", "default", resource_version=str(rv))
    assert await drain(watch, 2) == [("ADDED", "b"), ("DELETED", "a")]
    store.create("pods", pod("c"))
    assert await drain(watch, 1) == [("ADDED", "c")]
    assert await watch.next(0.05) is None
    watch.close()
    fresh = store.watch("pods", "default")
    assert sorted(await drain(fresh, 2)) == [("ADDED", "b"), ("ADDED", "c")]
    fresh.close()


async def test_read_only_watch_shares_objects_the_store_never_changes_in_place():
    store = Store()
    store.create("pods", pod("p"))
    shared, copied = store.watch("pods", read_only=True), store.watch("pods")
    (_, seen), (_, copy_) = await shared.next(1.0), await copied.next(1.0)
    assert seen is next(store.iter_objects("pods")) and copy_ is not seen and copy_ == seen
    before = yaml.safe_dump(seen)
    # every way of changing a pod replaces the stored object; the one a reader holds stays as it was
    store.mutate("pods", "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(a="b"))
    store.bind_pod("default", "p", "node-1")
    store.delete("pods", "default", "p", grace_period_seconds=30)
    assert yaml.safe_dump(seen) == before
    (_, changed) = await shared.next(1.0)
    assert changed["metadata"]["labels"] == {"a": "b"} and changed is not seen


async def test_watch_too_old_version_is_410():
    store = Store(history_size=5)
    first = store.resource_version
    for i in range(10):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    with pytest.raises(ApiError) as err:
        store.watch("configmaps", resource_version=str(first))
    assert err.value.code == 410 and err.value.reason == "Expired"
    assert err.value.message.startswith(f"too old resource version: {first} (")


async def test_watch_selector_enter_and_leave():
    store = Store()
    store.create("pods", pod("a", {"app": "x"}))
    watch = store.watch("pods", label_selector="app=nb", resource_version=str(store.resource_version))
    store.mutate("pods", "default", "a", lambda o: o["metadata"]["labels"].update(app="nb"))
    store.mutate("pods", "default", "a", lambda o: o["metadata"]["labels"].update(extra="1"))
    store.mutate("pods", "default", "a", lambda o: o["metadata"]["labels"].update(app="y"))
    assert await drain(watch, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    watch.close()


async def test_field_selected_watch_on_node_name():
    store = Store()
    store.create("pods", pod("a"))
    watch = store.watch("pods", field_selector="spec.nodeName=n1", resource_version=str(store.resource_version))
    store.bind_pod("default", "a", "n1")
    etype, obj = await watch.next(1)
    assert etype == "ADDED" and obj["spec"]["nodeName"] == "n1"
    assert obj["status"]["conditions"][0] == {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": obj["status"]["conditions"][0]["lastTransitionTime"],
    }
    watch.close()


async def test_pod_delete_grace():
    store = Store()
    store.create("pods", pod("unscheduled"))
    store.create("pods", pod("running"))
    store.create("pods", pod("forced"))
    store.bind_pod("default", "running", "n1")
    store.bind_pod("default", "forced", "n1")
    watch = store.watch("pods", resource_version=str(store.resource_version))
    store.delete("pods", "default", "unscheduled", grace_period_seconds=30)
    graceful = store.delete("pods", "default", "running", grace_period_seconds=20)
    store.delete("pods", "default", "forced", grace_period_seconds=0)
    assert graceful["metadata"]["deletionGracePeriodSeconds"] == 20 and graceful["metadata"]["deletionTimestamp"]
    assert await drain(watch, 3) == [("DELETED", "unscheduled"), ("MODIFIED", "running"), ("DELETED", "forced")]
    assert store.get("pods", "default", "running")["metadata"]["deletionTimestamp"]
    store.remove("pods", "default", "running")
    assert await drain(watch, 1) == [("DELETED", "running")]
    watch.close()


def test_owner_references_cascade_and_orphan():
    store = Store()
    owner = store.create("pods", pod("owner"))
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner["metadata"]["uid"]}
    store.create("services", {"metadata": {"name": "svc", "ownerReferences": [ref]}, "spec": {"ports": [{"port": 80}]}})
    store.create("secrets", {"metadata": {"name": "keep", "ownerReferences": [ref]}})
    store.delete("secrets", "default", "keep", propagation_policy="Orphan")  # removes it outright
    store.create("secrets", {"metadata": {"name": "kept", "ownerReferences": [ref]}})
    store.delete("pods", "default", "owner", propagation_policy="Orphan")
    assert "ownerReferences" not in store.get("secrets", "default", "kept")["metadata"]
    assert store.get("services", "default", "svc")  # orphaned too
    owner2 = store.create("pods", pod("owner2"))
    store.create(
        "configmaps", {"metadata": {"name": "dep", "ownerReferences": [{**ref, "name": "owner2", "uid": owner2["metadata"]["uid"]}]}}
    )
    store.delete("pods", "default", "owner2")
    with pytest.raises(ApiError):
        store.get("configmaps", "default", "dep")


def test_namespace_deletion_removes_contents():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "user-ns"}})
    store.create("configmaps", {"metadata": {"name": "c"}}, namespace="user-ns")
    store.delete("namespaces", None, "user-ns")
    assert [n["metadata"]["name"] for n in store.list("namespaces")[0]] == ["default", "kube-node-lease", "kube-public", "kube-system"]
    assert store.list("configmaps", "user-ns")[0] == []


def test_created_objects_validate_against_kubernetes_schema():
    store = Store()
    objs = (
        [
            store.create(
                "pods", pod("gpu", resources={"limits": {"nvidia.com/gpu": 2}}, ports=[{"name": "notebook-port", "containerPort": 8888}])
            ),
            store.bind_pod("default", "gpu", "node-1"),
            store.record_event(store.get("pods", "default", "gpu"), "Pulled", "Container image already present", host="node-1"),
            store.record_event(
                store.get("pods", "default", "gpu"),
                "FailedScheduling",
                "0/1 nodes are available",
                "Warning",
                "default-scheduler",
                scheduler_style=True,
            ),
            store.create("namespaces", {"metadata": {"name": "tenant"}}),
            store.create("services", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 8888}]}}),
            store.create(
                "persistentvolumeclaims",
                {"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
            ),
            store.create("secrets", {"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
            store.create("nodes", {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}),
        ]
        + store.list("namespaces")[0]
        + store.list("events")[0]
    )
    for obj in objs:
        assert kubernetes_validate.validate(obj, "1.31", strict=True) == "1.31", obj


def test_liqo_types_match_crds(liqo_crd_dir):
    paths = sorted(liqo_crd_dir.glob(f"{liqo.OFFLOADING_GROUP}_*.yaml"))
    assert len(paths) == 2  # NamespaceOffloading and VirtualNode
    for path in paths:
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        spec = crd["spec"]
        key = f"{spec['names']['plural']}.{spec['group']}"
        rtype = RESOURCES[key]
        assert rtype.kind == spec["names"]["kind"]
        assert rtype.namespaced == (spec["scope"] == "Namespaced")
        assert set(rtype.short_names) == set(spec["names"].get("shortNames", []))
        version = next(v for v in spec["versions"] if v["name"] == rtype.version and v.get("served"))
        expected = [(c["name"], c["type"], c.get("priority", 0), c["jsonPath"]) for c in version.get("additionalPrinterColumns", [])]
        assert list(rtype.printer_columns) == expected


def test_watch_event_lines_are_encoded_once_per_event_and_object():
    from jupyter_gpuburst.sim.watchserve import EncodedEvents

    store = Store()
    store.create("pods", pod("p"))
    stored = next(store.iter_objects("pods"))
    encoded = EncodedEvents(size=2)
    first = encoded.line("ADDED", stored)
    assert encoded.line("ADDED", stored) is first  # a second watcher gets the same bytes
    assert json.loads(first) == {"type": "ADDED", "object": stored}
    assert encoded.line("DELETED", stored) is not first  # a selector's leave is its own event
    store.mutate("pods", "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(a="b"))
    changed = next(store.iter_objects("pods"))
    assert json.loads(encoded.line("MODIFIED", changed))["object"]["metadata"]["labels"] == {"a": "b"}
    assert len(encoded._lines) == 2  # bounded: the oldest line went
