"""Warm pools without a cluster: settings, profile shapes, placeholder manifests, and the
controller's decisions (fill, make room for a spawn, shrink) against a fake API."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import kubernetes_validate
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.hub import database
from jupyter_gpuburst.hub.pools import kernelsites, live
from jupyter_gpuburst.hub.pools.controller import PoolController
from jupyter_gpuburst.hub.pools.kernelsites import KernelPoolSites
from jupyter_gpuburst.hub.pools.manifests import placeholder_pod, priority_class
from jupyter_gpuburst.hub.pools.settings import KERNELS, Pool, WarmPools, profile_shape, spawner_values
from jupyter_gpuburst.sim.cluster import node_object
from jupyter_gpuburst.sim.config import NodeConfig

PROFILES = [
    {"slug": "cpu", "display_name": "CPU"},
    {
        "slug": "gpu-1",
        "display_name": "1 GPU",
        "kubespawner_override": {
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
            "cpu_guarantee": 4,
            "mem_guarantee": "24G",
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
        },
    },
    {"slug": "mig", "display_name": "MIG", "gpuburst": {"resource": "nvidia.com/mig-1g.10gb", "count": 1}},
]


def test_pool_settings_refuse_bad_entries():
    with pytest.raises(TraitError, match=r"pools\[0\]: unknown key 'size'"):
        WarmPools(pools=[{"site": "origin", "profile": "gpu-1", "size": 2}])
    with pytest.raises(TraitError, match=r"'count' must be an integer >= 0"):
        WarmPools(pools=[{"site": "origin", "profile": "gpu-1", "count": -1}])
    with pytest.raises(TraitError, match="at most 63 characters"):
        WarmPools(pools=[{"site": "origin", "profile": "g" * 60, "count": 1}])
    with pytest.raises(TraitError, match=r"kernels\[0\]: schedule 'mon-fry 08:30-09:15': unknown day 'fry'"):
        WarmPools(kernels=[{"site": "origin", "profile": "gpu-1", "count": 1, "schedule": ["mon-fry 08:30-09:15"]}])
    with pytest.raises(TraitError, match="'schedule' must be a non-empty list"):
        WarmPools(pools=[{"site": "origin", "profile": "gpu-1", "count": 1, "schedule": "mon-fri 08:30-09:15"}])
    with pytest.raises(TraitError, match="WarmPools.timezone: unknown time zone 'Europe/Atlantis'"):
        WarmPools(timezone="Europe/Atlantis")
    with pytest.raises(TraitError, match="a second pool for gpu-1 on origin"):
        WarmPools(pools=[{"site": "origin", "profile": "gpu-1", "count": 1}] * 2)
    c = Config()
    c.KubeSpawner.profile_list = PROFILES
    c.WarmPools.pools = [{"site": "origin", "profile": "gpu-2", "count": 1}]
    with pytest.raises(ValueError, match="no profile 'gpu-2' in the spawner's profile_list"):
        live.install(c, lambda: None)


def test_profile_shapes_follow_the_spawner():
    c = Config()
    c.KubeSpawner.image = "example.org/base:1"
    c.KubeSpawner.profile_list = PROFILES
    base, profiles = spawner_values(c)
    gpu = profile_shape("gpu-1", base, profiles)
    assert gpu.image == "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"
    assert gpu.limits == {"nvidia.com/gpu": "1"} and gpu.requests == {"cpu": "4", "memory": "24G"}
    mig = profile_shape("mig", base, profiles)
    assert mig.image == "example.org/base:1" and mig.limits == {"nvidia.com/mig-1g.10gb": "1"}
    with pytest.raises(KeyError):
        profile_shape("nope", base, profiles)


@pytest.mark.parametrize("site", ["origin", "donor-1"])
def test_placeholder_is_valid_restricted_and_pinned(site):
    shape = profile_shape("gpu-1", {}, PROFILES)
    pod = placeholder_pod(Pool(site, "gpu-1", 2), shape, "jhub", "gpuburst-warm-pool")
    pod["metadata"]["name"] = pod["metadata"].pop("generateName") + "abcde"
    kubernetes_validate.validate(pod, "1.31", strict=True)
    kubernetes_validate.validate(priority_class("gpuburst-warm-pool", -10), "1.31", strict=True)
    spec = pod["spec"]
    assert spec["priorityClassName"] == "gpuburst-warm-pool" and spec["terminationGracePeriodSeconds"] == 0
    # the restricted Pod Security Standard (non-root, no escalation, no capabilities, RuntimeDefault)
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = spec["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False and not spec.get("hostNetwork") and not spec.get("volumes")
    labels = pod["metadata"]["labels"]
    assert labels[keys.POOL_LABEL] == f"{site}.gpu-1" and keys.SITE_LABEL not in labels
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    if site == "origin":
        assert terms == [liqo.local_node_affinity_term()] and spec["tolerations"] == []
    else:
        assert terms == [liqo.donor_node_affinity_term("donor-1")] and spec["tolerations"] == [liqo.virtual_node_toleration()]


def test_inventory_counts_placeholders_as_free():
    inv = Inventory(pool_namespace=lambda namespace: namespace == "jhub")
    inv.apply_node_event(
        "ADDED", node_object("g", NodeConfig(name="g", resources={"nvidia.com/gpu": 2}), "127.0.0.9", "2026-01-01T00:00:00Z")
    )
    pod = placeholder_pod(Pool("origin", "gpu-1", 1), profile_shape("gpu-1", {}, PROFILES), "jhub", "pc")
    pod["metadata"]["name"], pod["spec"]["nodeName"] = "p1", "g"
    inv.apply_pod_event("ADDED", pod)
    assert inv.snapshot().nodes["g"].free("nvidia.com/gpu") == 2


class FakeApi:
    """The two calls of the CoreV1Api and SchedulingV1Api the controller makes, on a dict."""

    def __init__(self):
        self.pods: dict[str, dict] = {}
        self.classes: list[dict] = []
        self.n = 0

    async def list_namespaced_pod(self, namespace, label_selector, _preload_content):
        body = json.dumps({"items": list(self.pods.values())}).encode()

        async def read():
            return body

        return SimpleNamespace(read=read)

    async def create_namespaced_pod(self, namespace, body):
        self.n += 1
        pod = json.loads(json.dumps(body))
        pod["metadata"].update(name=f"p{self.n}", uid=f"u{self.n}", creationTimestamp=f"2026-01-01T00:00:{self.n:02d}Z")
        pod["status"] = {"phase": "Pending"}
        self.pods[pod["metadata"]["name"]] = pod

    async def delete_namespaced_pod(self, name, namespace, body=None, grace_period_seconds=None):
        self.pods.pop(name)

    async def create_priority_class(self, body):
        self.classes.append(body)

    def bind(self, name, node):
        self.pods[name]["spec"]["nodeName"] = node
        self.pods[name]["status"]["phase"] = "Running"


def controller(pools, clock, wall_clock=None, booked=None):
    inv = Inventory(pool_namespace=lambda namespace: namespace == "jhub")
    for name in ("g1", "g2"):
        inv.apply_node_event(
            "ADDED", node_object(name, NodeConfig(name=name, cpu="16", memory="64Gi", resources={"nvidia.com/gpu": 2}), "127.0.0.9", "t")
        )
    tracker = SimpleNamespace(inventory=inv, snapshot=inv.snapshot)
    api = FakeApi()
    settings = WarmPools(pools=pools, pending_seconds=10)
    shapes = {"gpu-1": profile_shape("gpu-1", {}, PROFILES)}
    return PoolController(settings, shapes, "jhub", api, api, tracker, clock=clock, wall_clock=wall_clock, booked=booked), api, inv


async def test_controller_fills_to_the_room_gives_way_to_a_reservation_and_drops_stuck_placeholders():
    now = [100.0]
    ctl, api, inv = controller([{"site": "origin", "profile": "gpu-1", "count": 6}], lambda: now[0])
    await ctl.reconcile()
    assert api.classes[0]["metadata"]["name"] == "gpuburst-warm-pool" and api.classes[0]["preemptionPolicy"] == "Never"
    assert len(api.pods) == 4  # two nodes of two GPUs: room for 4 of the 6
    assert "origin has room for 4 more now" in ctl.report()[0]["note"]
    for name, node in zip(sorted(api.pods), ["g1", "g1", "g2", "g2"], strict=True):
        api.bind(name, node)
    now[0] += 5
    await ctl.reconcile()
    assert len(api.pods) == 4
    state = ctl.report()[0]
    assert state["ready"] == 4 and state["gpus"] == {"nvidia.com/gpu": 4}
    # a spawn reserved a GPU on g1: a placeholder there goes now, not when its pod arrives
    inv.hold("alice/", "g1", {"nvidia.com/gpu": 1})
    now[0] += 5
    await ctl.reconcile()
    on_g1 = [p for p in api.pods.values() if p["spec"].get("nodeName") == "g1"]
    assert len(on_g1) == 1 and len(api.pods) == 3
    assert ctl.report()[0]["gpu_hours"] == pytest.approx(4 * 5 / 3600 + 4 * 5 / 3600, abs=1e-4)
    # no room to refill; a placeholder that nobody can place is removed after pending_seconds
    api.pods["stuck"] = {**json.loads(json.dumps(api.pods[sorted(api.pods)[0]])), "status": {"phase": "Pending"}}
    api.pods["stuck"]["metadata"].update(name="stuck", uid="ustuck")
    api.pods["stuck"]["spec"].pop("nodeName")
    await ctl.reconcile()
    assert "stuck" in api.pods
    now[0] += 11
    await ctl.reconcile()
    assert "stuck" not in api.pods and "ran short" in ctl.report()[0]["note"]


async def test_a_scheduled_pool_fills_in_its_window_and_empties_outside_it():
    import datetime as dt

    now = [100.0]
    wall = [dt.datetime(2026, 11, 30, 8, 0)]  # a Monday, before the lab's window
    pools = [{"site": "origin", "profile": "gpu-1", "count": 2, "schedule": ["mon-fri 08:30-09:15"]}]
    ctl, api, _ = controller(pools, lambda: now[0], lambda: wall[0])
    await ctl.reconcile()
    state = ctl.report()[0]
    assert api.pods == {} and state["target"] == 0 and state["count"] == 2
    assert state["schedule"] == ["mon-fri 08:30-09:15"] and state["when"] == "off until 08:30"
    wall[0] = dt.datetime(2026, 11, 30, 8, 30)
    await ctl.reconcile()
    assert len(api.pods) == 2 and ctl.report()[0]["target"] == 2 and ctl.report()[0]["when"] == "on until 09:15"
    for name, node in zip(sorted(api.pods), ["g1", "g2"], strict=True):
        api.bind(name, node)
    wall[0] = dt.datetime(2026, 11, 30, 9, 15)
    await ctl.reconcile()
    assert api.pods == {} and ctl.report()[0]["when"] == "off until Tue 08:30"


async def test_a_pool_no_one_asks_for_is_drained_only_once_the_bookings_are_read():
    booked: list = [None]  # a restarted hub: its lab book not read yet
    ctl, api, _ = controller([{"site": "origin", "profile": "gpu-1", "count": 1}], lambda: 100.0, booked=lambda when: booked[0])
    shape = profile_shape("gpu-1", {}, PROFILES)
    for name, pool in [("lab", Pool("donor-1", "gpu-1", 1)), ("gone", Pool("donor-2", "gpu-1", 1))]:
        api.pods[name] = placeholder_pod(pool, shape, "jhub", "gpuburst-warm-pool")
        api.pods[name]["metadata"].update(name=name, uid=f"u-{name}", creationTimestamp="2026-01-01T00:00:00Z")
        api.pods[name]["status"] = {"phase": "Running"}
    await ctl.reconcile()
    assert {"lab", "gone"} <= set(api.pods) and len(api.pods) == 3  # the static pool ran its pass
    booked[0] = [Pool("donor-1", "gpu-1", 1)]  # the book is read: a lab is on, none asks for donor-2
    await ctl.reconcile()
    assert "lab" in api.pods and "gone" not in api.pods


async def test_with_every_pool_turned_off_a_hub_drains_what_an_earlier_one_left_once_its_bookings_are_read():
    booked: list = [None]
    ctl, api, _ = controller([], lambda: 100.0, booked=lambda when: booked[0])
    shape = profile_shape("gpu-1", {}, PROFILES)

    def left_behind(name):
        api.pods[name] = placeholder_pod(Pool("origin", "gpu-1", 1), shape, "jhub", "gpuburst-warm-pool")
        api.pods[name]["metadata"].update(name=name, uid=f"u-{name}", creationTimestamp="2026-01-01T00:00:00Z")

    left_behind("old")
    await ctl.reconcile()
    assert "old" in api.pods  # a lab's, maybe: the bookings are not read yet
    booked[0] = []
    await ctl.reconcile()
    assert "old" not in api.pods and api.classes == []  # drained; no PriorityClass made for no pool
    left_behind("later")  # once: while no pool runs, later passes list nothing
    await ctl.reconcile()
    assert "later" in api.pods


async def test_a_booked_kernel_pool_pre_starts_kernels_that_gpu_kernel_starts_look_for():
    booked: list = [[Pool("origin", "gpu-1", 2, KERNELS), Pool("origin", "nope", 1, KERNELS)]]
    shape = profile_shape("gpu-1", {}, PROFILES)
    asked: list[str] = []

    def kernel_pod_for(pool):  # hub/pools/live's factory: a builder per pool, None for no such kernel profile
        asked.append(pool.name)
        return (lambda: placeholder_pod(pool, shape, "jhub", "gpuburst-warm-pool")) if pool.profile == "gpu-1" else None

    ctl, api, _ = controller([], lambda: 100.0, booked=lambda when: booked[0])
    ctl.kernel_pod_for = kernel_pod_for
    kernelsites.follow(ctl.kernel_pools)
    try:
        sites = KernelPoolSites({("donor-1", "gpu-1")})  # the admin's own kernel pool
        await ctl.reconcile()
        assert sorted(p["metadata"]["labels"][keys.POOL_LABEL] for p in api.pods.values()) == ["origin.gpu-1.kernels"] * 2
        assert sorted(asked) == ["origin.gpu-1.kernels", "origin.nope.kernels"]  # once per pool, kept
        assert {s["profile"]: s["note"] for s in ctl.report()}["nope"] == "no GPU kernel profile 'nope' to keep warm for a lab"
        assert ("origin", "gpu-1") in sites and set(sites) == {("origin", "gpu-1"), ("donor-1", "gpu-1")}
        booked[0] = []  # the lab is over
        await ctl.reconcile()
        assert api.pods == {} and ("origin", "gpu-1") not in sites and set(sites) == {("donor-1", "gpu-1")}
    finally:
        kernelsites.follow(None)


def test_capacity_page_shows_pools_apart():
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from jupyter_gpuburst.core import names
    from jupyter_gpuburst.hub.service import PAGE_TEMPLATE, TEMPLATES

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape())
    pool = {
        "site": "donor-1",
        "profile": "gpu-1",
        "target": 8,
        "count": 8,
        "schedule": ["mon-fri 08:30-09:15"],
        "when": "on until 09:15",
        "ready": 6,
        "pending": 2,
        "gpus": {"nvidia.com/gpu": 6},
        "gpu_hours": 3.5,
        "note": "",
    }
    report = {
        "ready": True,
        "sites": [],
        "totals": {},
        "donors": [],
        "placements": [],
        "queue_length": 0,
        "reservations": 0,
        "pools": [pool],
    }
    html = env.get_template(PAGE_TEMPLATE).render(report=report, api_url="x", hub_prefix="/hub/", gpu_name=names.gpu_name, usage=None)
    row = html[html.index('id="gpuburst-pools"') :]
    assert "<td>donor-1</td>" in row and "<td>6 / 8</td>" in row and "6 × GPU" in row and "<td>3.50</td>" in row
    assert "mon-fri 08:30-09:15<br>" in row and "on until 09:15" in row
    pool.update(schedule=[], when="")
    row = env.get_template(PAGE_TEMPLATE).render(report=report, api_url="x", hub_prefix="/hub/", gpu_name=names.gpu_name, usage=None)
    assert '<td class="small">always</td>' in row
    report["pools"] = []
    assert 'id="gpuburst-pools"' not in env.get_template(PAGE_TEMPLATE).render(
        report=report, api_url="x", hub_prefix="/hub/", gpu_name=names.gpu_name, usage=None
    )


def test_shipped_priority_class_matches_the_hubs():
    import yaml

    shipped = yaml.safe_load((Path(__file__).resolve().parents[3] / "hub_config" / "warm-pools.yaml").read_text())
    settings = WarmPools()
    assert shipped == priority_class(settings.priority_class, settings.priority)
    kubernetes_validate.validate(shipped, "1.31", strict=True)


def test_a_pod_preempting_placeholders_is_not_moved_to_another_site():
    from jupyter_gpuburst.hub.sites.unschedulable import failed_scheduling_reason, unschedulable_reason

    message = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    pod = {"metadata": {"name": "jupyter-bob"}, "status": {"conditions": [condition]}}
    event = {"reason": "FailedScheduling", "message": message, "involvedObject": {"name": "jupyter-bob"}}
    assert unschedulable_reason(pod, "nvidia.com/gpu") == message
    assert failed_scheduling_reason([event], pod, None, "nvidia.com/gpu") == message
    pod["status"]["nominatedNodeName"] = "origin-gpu"
    assert unschedulable_reason(pod, "nvidia.com/gpu") is None
    assert failed_scheduling_reason([event], pod, None, "nvidia.com/gpu") is None


def test_the_ledger_counts_placeholders_as_the_pools(tmp_path):
    from jupyter_gpuburst.hub.accounting.ledger import POOL_USER, UsageLedger
    from jupyter_gpuburst.hub.accounting.store import UsageStore

    now = [1_795_000_000.0]
    inv = Inventory()
    ledger = UsageLedger(UsageStore(tmp_path / "u.sqlite"), inv.pod_requests, clock=lambda: now[0])
    pod = placeholder_pod(Pool("donor-1", "gpu-1", 1), profile_shape("gpu-1", {}, PROFILES), "jhub", "pc")
    pod["metadata"].update(name="p1", uid="u1")
    pod["spec"]["nodeName"] = "donor-1"
    pod["status"] = {"phase": "Running"}
    ledger.pod_event("ADDED", "jhub/p1", pod)
    now[0] += 1800
    ledger.pod_event("DELETED", "jhub/p1", None)
    rows = ledger.usage_rows("2000-01-01", "2100-01-01")
    assert [(r["user"], r["mode"], r["site"], r["profile"], r["gpu_seconds"]) for r in rows] == [
        (POOL_USER, "pool", "donor-1", "gpu-1", 1800.0)
    ]
    assert ledger.usage_rows("2000-01-01", "2100-01-01", user="alice") == []


def test_pool_metrics_are_exported():
    from prometheus_client import REGISTRY

    from jupyter_gpuburst.hub import metrics

    before = REGISTRY.get_sample_value(metrics.metric_name("pool_gpu_seconds_total"), {"site": "origin", "profile": "m-test"}) or 0.0
    metrics.record_pool("origin", "m-test", 3, 1, 12.5)
    labels = {"site": "origin", "profile": "m-test"}
    assert REGISTRY.get_sample_value(metrics.metric_name("pool_placeholders"), {**labels, "state": "ready"}) == 3
    assert REGISTRY.get_sample_value(metrics.metric_name("pool_placeholders"), {**labels, "state": "pending"}) == 1
    assert REGISTRY.get_sample_value(metrics.metric_name("pool_gpu_seconds_total"), labels) == before + 12.5


def test_the_readmes_lab_config_is_valid_and_its_bill_adds_up(sqlite_wal_undone):
    """The README's "Preparing a lab" block is the config an admin pastes: it must load, and its
    pools must cost what the README says."""
    import re

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme[readme.index("## Preparing a lab") :]
    section = section[: section.index("\n## ", 1)]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    c = Config()
    exec(block, {"c": c})  # noqa: S102 - the README's own text, as jupyterhub_config.py runs it
    # the hub's database in WAL mode: its spawns' commits stop holding the hub at a lab's start
    assert event.contains(Engine, "connect", database._on_connect)
    settings = WarmPools(config=c)
    pools = settings.pool_list()
    assert {(p.site, p.kind) for p in pools} == {("donor-1", "placeholders"), ("origin", "kernels")}
    assert all(p.schedule for p in pools) and str(settings.tz()) == "Europe/Rome"
    assert c.GPUBurstSpawner.queue_when_full is True
    placeholders = next(p for p in pools if p.kind == "placeholders")
    (window,) = placeholders.schedule
    gpu_hours = placeholders.count * (window.end - window.start) / 60
    assert f"{placeholders.count} GPUs from 8:30 to 9:15 are {gpu_hours:g} GPU-hours a lab day" in " ".join(section.split())
