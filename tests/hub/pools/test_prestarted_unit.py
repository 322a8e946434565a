"""Pre-started GPU kernels without a cluster: their pod, the adopter's Secret and patch, the
settings that make them, the capacity page and the ledger (the pool's time, then the student's)."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import kubernetes_validate
import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels.prestarted import (
    CONNECTION_MOUNT,
    CONNECTION_VOLUME,
    POOL_LABELS,
    adoption_patch,
    adoption_secret,
    pool_name,
    pooled_pod,
)
from jupyter_gpuburst.hub.kernels.registry import KernelRecord
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.pools import live
from jupyter_gpuburst.hub.pools.settings import Pool, WarmPools

PROFILE = KernelProfile(slug="gpu-1", display_name="Python 3 (1 GPU)", resource="nvidia.com/gpu", count=1)
KEY = "k" * 32


def pooled(site: str = "origin") -> dict:
    pod = pooled_pod(site, PROFILE, GPUKernelSettings(), "quay.io/jupyter/pytorch-notebook", "jhub", "gpuburst-warm-pool", ["torch"])
    pod["metadata"]["uid"] = "uid-1"
    return pod


@pytest.mark.parametrize("site", ["origin", "donor-1"])
def test_a_pooled_kernel_is_a_valid_restricted_kernel_pod_with_no_key_and_no_owner(site):
    pod = pooled(site)
    kubernetes_validate.validate(pod, "1.31", strict=True)
    spec, meta = pod["spec"], pod["metadata"]
    assert spec["priorityClassName"] == "gpuburst-warm-pool" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e for e in container["env"]}
    # no key, no user, no secretKeyRef that would hold the pod back: the Secret volume is optional
    assert keys.KERNEL_CONNECTION_ENV not in env and "JUPYTERHUB_USER" not in env
    assert "secretKeyRef" not in json.dumps(pod)
    assert env[keys.KERNEL_CONNECTION_DIR_ENV]["value"] == CONNECTION_MOUNT
    (volume,) = [v for v in spec["volumes"] if v["name"] == CONNECTION_VOLUME]
    assert volume["secret"] == {"secretName": meta["name"], "optional": True, "defaultMode": 0o400}
    assert "ownerReferences" not in meta and keys.USER_ANNOTATION not in meta["annotations"]
    # the inventory counts it as free (a pool's), and its labels name the pool apart from placeholders
    assert meta["labels"][keys.POOL_LABEL] == pool_name(site, "gpu-1") == Pool(site, "gpu-1", 1, "kernels").name
    assert meta["labels"][keys.COMPONENT_LABEL] == keys.KERNEL_COMPONENT and keys.SITE_LABEL not in meta["labels"]
    if site != "origin":
        assert spec["tolerations"] and "donor-1" in json.dumps(spec["affinity"])
    assert pooled(site)["metadata"]["name"] != meta["name"]  # each its own name (and Secret)


def test_adoption_gives_the_pod_a_new_key_its_owner_and_a_kernels_labels():
    pod = pooled()
    record = KernelRecord(id="abc123", user="alice", server_name="", kernel_id="k1", profile=PROFILE, namespace="jhub")
    record.groups = frozenset({"gpu-students"})
    placement = Placement("origin", None, "origin-gpu", "nvidia.com/gpu", 1, "1 of 2 GPUs free on the origin")
    server = {"metadata": {"name": "jupyter-alice", "uid": "server-uid"}}
    secret = adoption_secret(pod, KEY, "hmac-sha256", GPUKernelSettings().ports(0), {"JUPYTERHUB_USER": "alice"}, placement)
    kubernetes_validate.validate(secret, "1.31", strict=True)
    assert json.loads(base64.b64decode(secret["data"][keys.KERNEL_CONNECTION_FILE]))["key"] == KEY
    assert json.loads(base64.b64decode(secret["data"][keys.KERNEL_ADOPTER_FILE])) == {"env": {"JUPYTERHUB_USER": "alice"}}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # goes with the pod, whoever deletes it
    patch = adoption_patch(pod, record, placement, server, "why")
    assert KEY not in json.dumps(patch)
    labels = patch["metadata"]["labels"]
    assert all(labels[k] is None for k in POOL_LABELS) and labels[keys.SITE_LABEL] == "origin"
    annotations = patch["metadata"]["annotations"]
    assert annotations[keys.KERNEL_ANNOTATION] == "abc123" and annotations[keys.USER_ANNOTATION] == "alice"
    assert annotations[keys.PRESTARTED_ANNOTATION] == pool_name("origin", "gpu-1")
    assert json.loads(annotations[keys.GROUPS_ANNOTATION]) == ["gpu-students"]
    assert patch["metadata"]["ownerReferences"][0]["uid"] == "server-uid"


async def test_kernel_pools_are_checked_like_placeholder_pools():
    with pytest.raises(TraitError, match=r"WarmPools.kernels\[0\]: 'count'"):
        WarmPools(kernels=[{"site": "origin", "profile": "gpu-1", "count": -1}])
    settings = WarmPools(kernels=[{"site": "origin", "profile": "gpu-1", "count": 2}])
    assert [(p.name, p.kind) for p in settings.pool_list()] == [("origin.gpu-1.kernels", "kernels")]
    c = Config()
    c.GPUKernelSettings.profiles = [{"slug": "gpu-1", "display_name": "1 GPU", "resource": "nvidia.com/gpu", "count": 1}]
    c.WarmPools.kernels = [{"site": "origin", "profile": "nope", "count": 1}]
    with pytest.raises(ValueError, match="no GPU kernel profile 'nope'"):
        live.install(c, lambda: None)
    c.WarmPools.kernels = [{"site": "origin", "profile": "gpu-1", "count": 1}]
    builders = live.kernel_pod_builders(c, WarmPools(config=c), "jhub")
    assert (await builders["origin.gpu-1.kernels"]())["metadata"]["namespace"] == "jhub"


def test_capacity_page_shows_kernel_pools_apart():
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from jupyter_gpuburst.core import names
    from jupyter_gpuburst.hub.service import PAGE_TEMPLATE, TEMPLATES

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape())
    row = {"site": "origin", "target": 2, "ready": 1, "pending": 1, "gpus": {"nvidia.com/gpu": 1}, "gpu_hours": 0.5, "note": ""}
    report = {"ready": True, "sites": [], "totals": {}, "donors": [], "placements": [], "queue_length": 0, "reservations": 0}
    report["pools"] = [{**row, "profile": "gpu-1", "kind": "placeholders"}, {**row, "profile": "gpu-1", "kind": "kernels"}]
    html = env.get_template(PAGE_TEMPLATE).render(report=report, api_url="x", hub_prefix="/hub/", gpu_name=names.gpu_name, usage=None)
    table = html[html.index('id="gpuburst-pools"') :]
    assert table.count("<td>placeholders</td>") == 1 and table.count("<td>pre-started GPU kernels</td>") == 1


def test_the_ledger_counts_a_pooled_kernel_as_the_pools_until_a_student_adopts_it(tmp_path):
    from jupyter_gpuburst.hub.accounting.ledger import POOL_USER, UsageLedger
    from jupyter_gpuburst.hub.accounting.store import UsageStore

    now = [1_795_000_000.0]
    ledger = UsageLedger(UsageStore(tmp_path / "u.sqlite"), Inventory().pod_requests, clock=lambda: now[0])
    pod = pooled()
    pod["spec"]["nodeName"] = "origin-gpu"
    pod["status"] = {"phase": "Running"}
    ledger.pod_event("ADDED", "jhub/p", pod)
    now[0] += 1200  # waited 20 min for a student
    record = KernelRecord(id="abc123", user="alice", server_name="", kernel_id="k1", profile=PROFILE, namespace="jhub")
    placement = Placement("origin", None, "origin-gpu", "nvidia.com/gpu", 1, "why")
    patch = adoption_patch(pod, record, placement, None, "why")["metadata"]
    for field in ("labels", "annotations"):
        merged = {**pod["metadata"][field], **patch[field]}
        pod["metadata"][field] = {k: v for k, v in merged.items() if v is not None}
    # the scheduler bound it 20 min ago: the student's time starts at adoption, not then
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-18T00:00:00Z"}]
    ledger.pod_event("MODIFIED", "jhub/p", pod)
    ledger.pod_event("MODIFIED", "jhub/p", pod)  # a status change later: nothing new
    now[0] += 600  # alice computes for 10 min
    ledger.pod_event("DELETED", "jhub/p", None)
    rows = ledger.usage_rows("2000-01-01", "2100-01-01")
    assert sorted((r["user"], r["mode"], r["site"], r["profile"], r["gpu_seconds"]) for r in rows) == [
        (POOL_USER, "pool", "origin", "gpu-1", 1200.0),
        ("alice", "kernel", "origin", "gpu-1", 600.0),
    ]


class FakeApi:
    """The calls the pool controller makes, on a dict; a pod keeps the name it was given."""

    def __init__(self):
        self.pods: dict[str, dict] = {}

    async def list_namespaced_pod(self, namespace, label_selector, _preload_content):
        body = json.dumps({"items": list(self.pods.values())}).encode()

        async def read():
            return body

        return SimpleNamespace(read=read)

    async def create_namespaced_pod(self, namespace, body):
        pod = json.loads(json.dumps(body))
        pod["metadata"].update(uid=f"u{len(self.pods)}", creationTimestamp="2026-01-01T00:00:00Z")
        pod["status"] = {"phase": "Pending"}
        self.pods[pod["metadata"]["name"]] = pod

    async def delete_namespaced_pod(self, name, namespace, body=None, grace_period_seconds=None):
        self.pods.pop(name)

    async def create_priority_class(self, body):
        pass

    def bind(self, name, node):
        self.pods[name]["spec"]["nodeName"] = node
        self.pods[name]["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def kernel_pool_on_one_node(gpus: int, build, **kwargs):
    """(controller, its fake API, the inventory) of a pool of 2 pre-started ``gpu-1`` kernels on
    the origin, whose one node ``g`` has ``gpus`` GPUs; ``build`` makes each kernel pod."""
    from jupyter_gpuburst.hub.pools.controller import PoolController
    from jupyter_gpuburst.sim.cluster import node_object
    from jupyter_gpuburst.sim.config import NodeConfig

    inv = Inventory(pool_namespace=lambda namespace: namespace == "jhub")
    node = NodeConfig(name="g", cpu="16", memory="64Gi", resources={"nvidia.com/gpu": gpus})
    inv.apply_node_event("ADDED", node_object("g", node, "127.0.0.9", "t"))
    api = FakeApi()
    settings = WarmPools(kernels=[{"site": "origin", "profile": "gpu-1", "count": 2}])
    tracker = SimpleNamespace(inventory=inv, snapshot=inv.snapshot)
    ctl = PoolController(settings, {}, "jhub", api, api, tracker, kernel_pods={pool_name("origin", "gpu-1"): build}, **kwargs)
    return ctl, api, inv


async def test_the_controller_keeps_a_kernel_pool_apart_and_builds_each_pod_anew():
    from prometheus_client import REGISTRY

    from jupyter_gpuburst.hub import metrics

    built = []

    def build():
        built.append(pooled())
        return built[-1]

    now = [0.0]
    ctl, api, _ = kernel_pool_on_one_node(4, build, clock=lambda: now[0])
    await ctl.reconcile()
    # two pods, each made by its own call: each has a name (and so a Secret) of its own
    assert len(api.pods) == 2 and set(api.pods) <= {b["metadata"]["name"] for b in built}
    for name in list(api.pods):
        api.bind(name, "g")
    now[0] += 10
    await ctl.reconcile()
    (state,) = ctl.report()
    assert (state["kind"], state["profile"], state["ready"], state["gpus"]) == ("kernels", "gpu-1", 2, {"nvidia.com/gpu": 2})
    # its metrics are apart from a placeholder pool of the same slug
    labels = {"site": "origin", "profile": "kernel:gpu-1", "state": "ready"}
    assert REGISTRY.get_sample_value(metrics.metric_name("pool_placeholders"), labels) == 2
    # a kernel still importing (running, not Ready) is not ready yet
    api.pods[sorted(api.pods)[0]]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    await ctl.reconcile()
    assert (ctl.report()[0]["ready"], ctl.report()[0]["pending"]) == (1, 1)


async def test_a_kernel_being_adopted_costs_its_pool_no_other_waiting_kernel():
    # the request adopting a waiting kernel holds a reservation for that kernel's GPU: the pool
    # must not count the GPU twice and remove another waiting kernel to make room for it
    from jupyter_gpuburst.hub.kernels import prestarted

    ctl, api, inv = kernel_pool_on_one_node(2, pooled)
    await ctl.reconcile()
    for name in list(api.pods):
        api.bind(name, "g")
    held, other = sorted(api.pods)
    assert prestarted._take(api.pods[held], "k1")  # a request claims one before it is placed...
    try:
        inv.hold("alice/k1", "g", {"nvidia.com/gpu": 1})  # ...and its reservation lands on its node
        await ctl.reconcile()
        assert set(api.pods) == {held, other}
    finally:
        prestarted._hold(api.pods[held], "k1", 0)


def test_a_hold_that_ran_out_is_lost_to_the_request_that_took_the_kernel_since(monkeypatch):
    from jupyter_gpuburst.hub.kernels import prestarted

    waiting = pooled()
    clock = [100.0]
    monkeypatch.setattr(prestarted.time, "monotonic", lambda: clock[0])
    try:
        assert prestarted._take(waiting, "k1") and prestarted.claimed("jhub", waiting["metadata"]["name"])
        assert not prestarted._take(waiting, "k2")  # held: nobody else takes it
        assert prestarted._take(waiting, "k1")  # its holder may take it again
        clock[0] += prestarted.CLAIM_S + 1  # a hub loaded for longer than a hold lasts
        assert prestarted._take(waiting, "k2")
        # the first holder lost it: it neither takes it back nor lets it go for the new holder
        assert not prestarted._take(waiting, "k1")
        prestarted._hold(waiting, "k1", 0)
        assert prestarted.claimed("jhub", waiting["metadata"]["name"])
        prestarted._hold(waiting, "k2", 0)
        assert not prestarted.claimed("jhub", waiting["metadata"]["name"])
    finally:
        prestarted.CLAIMS.clear()


async def test_a_request_whose_hold_ran_out_does_not_adopt_the_kernel_another_took(monkeypatch):
    from jupyter_gpuburst.hub.kernels import prestarted

    waiting = pooled()
    tried = []

    async def adopt_one(registry, record, placement, server_pod, key, scheme, pod):
        tried.append(record.id)
        return True

    monkeypatch.setattr(prestarted, "_adopt_one", adopt_one)
    registry = SimpleNamespace(prestarted={("origin", "gpu-1")}, settings=GPUKernelSettings())
    registry.settings.files_policy = None
    record = SimpleNamespace(id="k1", profile=PROFILE, ports=registry.settings.ports(prestarted.PORT_SET), relocated_from=None)
    placement = Placement(site="origin", cluster_id=None, node=None, resource="nvidia.com/gpu", count=1, reason="")
    try:
        prestarted.CLAIMS[f"jhub/{waiting['metadata']['name']}"] = (float("inf"), "k2")  # taken since by k2
        assert await prestarted._adopt_any(registry, record, placement, None, KEY, "hmac-sha256", "", waiting) is False
        assert tried == []
        prestarted.CLAIMS.clear()
        assert await prestarted._adopt_any(registry, record, placement, None, KEY, "hmac-sha256", "", waiting) is True
        assert tried == ["k1"]
    finally:
        prestarted.CLAIMS.clear()
