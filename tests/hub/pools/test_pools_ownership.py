"""Pools act only on what is theirs: a pass deletes a pod only as it listed it (an adopted kernel
or a pod made since under the same name is left alone), and a pool label counts as pool capacity
only on a pod in the pools' own namespace."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

from kubernetes_asyncio.client.exceptions import ApiException
from traitlets.config import Config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.hub.capacity.ownership import PodOwnership
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels.prestarted import pool_name, pooled_pod
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.pools.controller import PoolController
from jupyter_gpuburst.hub.pools.manifests import placeholder_pod
from jupyter_gpuburst.hub.pools.settings import Pool, Shape, WarmPools
from jupyter_gpuburst.hub.settings import settings_from_config
from jupyter_gpuburst.sim.cluster import node_object
from jupyter_gpuburst.sim.config import NodeConfig
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.priority import KEY as PRIORITY_CLASSES
from jupyter_gpuburst.sim.store import Store

PROFILE = KernelProfile(slug="gpu-1", display_name="Python 3 (1 GPU)", resource="nvidia.com/gpu", count=1)
POOL = pool_name("origin", "gpu-1")
CLASS = WarmPools().priority_class
SHAPE = Shape(image="jupyter/base:1", requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"})


class StoreApi:
    """The pool controller's CoreV1Api calls, answered by the emulator's store (whose delete
    preconditions tests/sim pins to kube-apiserver's); ``listed`` runs after each list, as
    whatever another hub or request does while a pass works from its list."""

    def __init__(self):
        self.store = Store()
        self.listed = lambda: None

    async def list_namespaced_pod(self, namespace, label_selector, _preload_content):
        items, _ = self.store.list("pods", namespace, label_selector=label_selector)
        body = json.dumps({"items": items}).encode()
        self.listed()

        async def read():
            return body

        return SimpleNamespace(read=read)

    async def create_namespaced_pod(self, namespace, body):
        self.store.create("pods", json.loads(json.dumps(body)), namespace)

    async def delete_namespaced_pod(self, name, namespace, body=None, grace_period_seconds=None):
        preconditions = body.preconditions if body is not None else None
        wanted = None if preconditions is None else {"uid": preconditions.uid, "resourceVersion": preconditions.resource_version}
        try:
            self.store.delete("pods", namespace, name, grace_period_seconds, preconditions=wanted)
        except ApiError as err:
            raise ApiException(status=err.code, reason=err.reason) from None

    async def create_priority_class(self, body):
        self.store.create(PRIORITY_CLASSES, body)

    def bind(self, name):
        def running(pod):
            pod["spec"]["nodeName"] = "g"
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

        self.store.mutate("pods", "jhub", name, running)


def pool_of_two(pools: dict, wall, log: logging.Logger):
    inv = Inventory(pool_namespace=lambda namespace: namespace == "jhub")
    node = NodeConfig(name="g", cpu="16", memory="64Gi", resources={"nvidia.com/gpu": 4})
    inv.apply_node_event("ADDED", node_object("g", node, "127.0.0.9", "t"))
    api = StoreApi()
    api.store.create("namespaces", {"metadata": {"name": "jhub"}})
    settings = WarmPools(**pools)
    build = {POOL: lambda: pooled_pod("origin", PROFILE, GPUKernelSettings(), "jupyter/base:1", "jhub", CLASS, [])}
    tracker = SimpleNamespace(inventory=inv, snapshot=inv.snapshot)
    shapes = {"gpu-1": SHAPE}
    ctl = PoolController(settings, shapes, "jhub", api, api, tracker, log=log, kernel_pods=build, wall_clock=lambda: wall[0])
    return ctl, api


async def test_a_pass_that_listed_a_kernel_waiting_never_deletes_it_once_adopted(caplog):
    import datetime as dt

    wall = [dt.datetime(2026, 11, 30, 9, 0)]  # a Monday, in the lab's window
    kernels = [{"site": "origin", "profile": "gpu-1", "count": 2, "schedule": ["mon-fri 08:30-09:15"]}]
    ctl, api = pool_of_two({"kernels": kernels}, wall, logging.getLogger("pools-test"))
    await ctl.reconcile()
    names = sorted(p["metadata"]["name"] for p in api.store.list("pods", "jhub")[0])
    assert len(names) == 2
    for name in names:
        api.bind(name)
    adopted, waiting = names

    def adopt():
        # a request adopts one right after the pass listed it (another hub's, or one whose hold
        # ran out: no claim of this hub protects it); the pool's labels go, the kernel's come
        def patch(pod):
            for label in (keys.POOL_LABEL, keys.POOL_SITE_LABEL, keys.POOL_PROFILE_LABEL, keys.POOL_KIND_LABEL):
                pod["metadata"]["labels"].pop(label, None)
            pod["metadata"]["annotations"][keys.KERNEL_ANNOTATION] = "k1"

        api.store.mutate("pods", "jhub", adopted, patch)
        api.listed = lambda: None

    api.listed = adopt
    wall[0] = dt.datetime(2026, 11, 30, 9, 30)  # the window closed: the pass empties the pool
    with caplog.at_level(logging.DEBUG, logger="pools-test"):
        await ctl.reconcile()
    left = {p["metadata"]["name"]: p for p in api.store.list("pods", "jhub")[0]}
    assert set(left) == {adopted}, "the adopted kernel was deleted by a pass that listed it waiting"
    assert left[adopted]["metadata"]["annotations"][keys.KERNEL_ANNOTATION] == "k1"
    # the 409 is someone else's act, not a failure: removed counts the one that went, no warning
    assert ctl.report()[0]["target"] == 0 and ctl.states[POOL].removed == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_placeholder_made_since_under_a_listed_name_is_not_deleted():
    import datetime as dt

    wall = [dt.datetime(2026, 11, 30, 9, 0)]
    pools = [{"site": "origin", "profile": "gpu-1", "count": 1, "schedule": ["mon-fri 08:30-09:15"]}]
    ctl, api = pool_of_two({"pools": pools}, wall, logging.getLogger("pools-test"))
    await ctl.reconcile()
    ((listed),) = api.store.list("pods", "jhub")[0]
    name = listed["metadata"]["name"]

    def replaced():
        # the listed placeholder went (preempted) and a pod of the same name was made since
        api.store.delete("pods", "jhub", name, 0)
        again = placeholder_pod(Pool("origin", "gpu-1", 1), SHAPE, "jhub", CLASS)
        again["metadata"]["name"] = name
        del again["metadata"]["generateName"]
        api.store.create("pods", again, "jhub")
        api.listed = lambda: None

    api.listed = replaced
    wall[0] = dt.datetime(2026, 11, 30, 9, 30)
    await ctl.reconcile()
    (left,) = api.store.list("pods", "jhub")[0]
    assert left["metadata"]["name"] == name and left["metadata"]["uid"] != listed["metadata"]["uid"]


def gpu_pod(namespace: str) -> dict:
    pod = placeholder_pod(Pool("origin", "gpu-1", 1), SHAPE, namespace, "pc")
    pod["metadata"].update(name="p1", uid="u1")
    pod["spec"]["nodeName"] = "g"
    pod["status"] = {"phase": "Running"}
    return pod


def test_a_pool_label_frees_gpus_only_in_the_pools_namespace():
    c = Config()
    c.KubeSpawner.namespace = "jhub"
    c.WarmPools.pools = [{"site": "origin", "profile": "gpu-1", "count": 1}]
    c.WarmPools.namespace = "pools"
    ownership = PodOwnership.from_config(c)
    assert ownership.owns_pool_namespace("pools") and ownership.owns_pool_namespace("jhub")
    assert not ownership.owns_pool_namespace("other-tenant")
    assert not PodOwnership.from_config(Config()).owns_pool_namespace("pools")  # no pools configured there

    tracker = CapacityTracker(None, settings_from_config(c), ownership=ownership)
    node = NodeConfig(name="g", cpu="16", memory="64Gi", resources={"nvidia.com/gpu": 2})
    tracker._on_node_event("ADDED", node_object("g", node, "127.0.0.9", "t"))
    # another tenant's pod carrying the label holds its GPU: not room for the next spawn, not the pool's
    tracker._on_pod_event("ADDED", gpu_pod("other-tenant"))
    assert tracker.snapshot().nodes["g"].free("nvidia.com/gpu") == 1
    assert tracker.pool_pods("origin.gpu-1") == []
    tracker._on_pod_event("DELETED", gpu_pod("other-tenant"))
    # the hub's own placeholder, in the pools' namespace: its room is free to the next spawn
    for namespace in ("pools", "jhub"):
        tracker._on_pod_event("ADDED", gpu_pod(namespace))
        assert tracker.snapshot().nodes["g"].free("nvidia.com/gpu") == 2
        assert [p["metadata"]["name"] for p in tracker.pool_pods("origin.gpu-1")] == ["p1"]
        tracker._on_pod_event("DELETED", gpu_pod(namespace))


def test_pool_pods_seen_before_their_namespace_was_the_hubs_are_the_pools_once_it_is():
    # a donor's kernel namespace is the hub's once its kernel registry runs: pods of a pool seen
    # there before (a hub restarting) free their room and are found as the pool's from then on
    tracker = CapacityTracker(None, settings_from_config(Config()), ownership=PodOwnership(["jhub"]))
    node = NodeConfig(name="g", cpu="16", memory="64Gi", resources={"nvidia.com/gpu": 2})
    tracker._on_node_event("ADDED", node_object("g", node, "127.0.0.9", "t"))
    tracker._on_pod_event("ADDED", gpu_pod("jhub-kernels-donor-1"))
    assert tracker.snapshot().nodes["g"].free("nvidia.com/gpu") == 1 and tracker.pool_pods("origin.gpu-1") == []
    tracker.own_namespace("jhub-kernels-donor-1")
    assert tracker.snapshot().nodes["g"].free("nvidia.com/gpu") == 2
    assert [p["metadata"]["name"] for p in tracker.pool_pods("origin.gpu-1")] == ["p1"]
    tracker._on_pod_event("DELETED", gpu_pod("jhub-kernels-donor-1"))
    assert tracker.pool_pods("origin.gpu-1") == [] and tracker.snapshot().nodes["g"].free("nvidia.com/gpu") == 2
