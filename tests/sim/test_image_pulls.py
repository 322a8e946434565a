"""Image pulls as the kubelet does them: per-node cache, size / bandwidth, pull policies, events, node status."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import kubernetes
import kubernetes_validate
import pytest

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.config import ClusterConfig, NodeConfig, parse_config
from jupyter_gpuburst.sim.kubelet.images import ImageSettings, go_duration
from jupyter_gpuburst.sim.testing import running_federation, wait_for_pod, wait_until

MI = 1024**2
BIG = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"
SMALL = "busybox:1.36"
PULLED = re.compile(r'^Successfully pulled image "(.+)" in (\S+) \((\S+) including waiting\)\. Image size: (\d+) bytes\.$')


@contextlib.asynccontextmanager
async def cold_cluster(tmp_path, index: int, preloaded: tuple[str, ...] = (), bandwidth: int = 100 * MI):
    settings = ImageSettings(sizes={BIG: 80 * MI, SMALL: 4 * MI}, default_size=2 * MI, bandwidth=bandwidth, preloaded=preloaded)
    cluster = Cluster(ClusterConfig(name="c", nodes=(NodeConfig(name="n"),), images=settings), index, tmp_path)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


def sleeper(name: str, image: str, policy: str | None = None) -> dict:
    container = {"name": "c", "image": image, "command": ["sleep", "1000"]}
    if policy:
        container["imagePullPolicy"] = policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def events_of(store, name: str) -> list[dict]:
    events, _ = store.list("events", "default", field_selector=f"involvedObject.name={name}")
    return events


def running(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running"


def seconds(go: str) -> float:
    return float(go[:-2]) / 1000 if go.endswith("ms") else float(go[:-1]) if go.endswith("s") and "m" not in go else 0.0


def test_go_duration_matches_go():
    assert [go_duration(s) for s in (0, 0.0004, 0.25, 1.5, 15.981, 123.25, 3600)] == [
        "0s",
        "0s",
        "250ms",
        "1.5s",
        "15.981s",
        "2m3.25s",
        "1h0m0s",
    ]


async def test_cold_pull_takes_size_over_bandwidth_then_the_node_has_it(tmp_path):
    async with cold_cluster(tmp_path, 42) as cluster:
        store = cluster.store
        started = time.monotonic()

        def create():
            config = kubernetes.client.Configuration()
            config.host = cluster.url
            with kubernetes.client.ApiClient(config) as api:
                kubernetes.client.CoreV1Api(api).create_namespaced_pod("default", sleeper("first", BIG))

        await asyncio.to_thread(create)
        # while the image comes the container waits as ContainerCreating
        pulling = await wait_for_pod(store, "default", "first", lambda p: p["status"].get("containerStatuses"), timeout=5)
        assert pulling["status"]["phase"] == "Pending"
        assert pulling["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
        await wait_for_pod(store, "default", "first", running, timeout=10)
        elapsed = time.monotonic() - started
        assert elapsed >= 0.75, elapsed  # 80 MiB at 100 MiB/s
        events = events_of(store, "first")
        reasons = [e["reason"] for e in events]
        assert reasons[:5] == ["Scheduled", "Pulling", "Pulled", "Created", "Started"], reasons
        assert events[1]["message"] == f'Pulling image "{BIG}"'
        m = PULLED.match(events[2]["message"])
        assert m and m.group(1) == BIG and m.group(4) == str(80 * MI), events[2]["message"]
        assert 0.7 <= seconds(m.group(2)) <= seconds(m.group(3)) + 0.001
        node = store.get("nodes", None, "n")
        assert node["status"]["images"] == [{"names": [BIG], "sizeBytes": 80 * MI}]
        kubernetes_validate.validate(node, "1.31", strict=True)

        # the next pod on that node finds it there
        store.create("pods", sleeper("second", BIG), "default")
        await wait_for_pod(store, "default", "second", running, timeout=10)
        assert [e["message"] for e in events_of(store, "second") if e["reason"] == "Pulled"] == [
            f'Container image "{BIG}" already present on machine'
        ]


async def test_pulls_on_a_node_are_serialized_and_shared(tmp_path):
    async with cold_cluster(tmp_path, 43) as cluster:
        store = cluster.store
        for name in ("a", "b"):
            store.create("pods", sleeper(name, BIG), "default")
        store.create("pods", sleeper("small", SMALL), "default")
        for name in ("a", "b", "small"):
            await wait_for_pod(store, "default", name, running, timeout=10)
        pulled = {n: PULLED.match(next(e["message"] for e in events_of(store, n) if e["reason"] == "Pulled")) for n in ("a", "b", "small")}
        # one pull of the big image served both pods (neither found it already present)
        assert all(pulled.values()), pulled
        # the small image's pull got the node's pull slot only once the big one's had ended,
        # and its event counts that wait apart from its own time; the order, not how long each
        # took, which a busy machine stretches
        pulls = cluster.kubelet.images._pulls
        big, small = pulls[("n", BIG)], pulls[("n", SMALL)]
        big_pull_s = cluster.kubelet.images.settings.pull_seconds(BIG)  # 80 MiB at 100 MiB/s
        assert small.started - big.started >= big_pull_s, (big, small)
        own, including = seconds(pulled["small"].group(2)), seconds(pulled["small"].group(3))
        assert own <= including and abs(own - (small.finished - small.started)) < 0.002, pulled["small"].group(0)


async def test_pull_policies(tmp_path):
    # 1 MiB/s: fetching SMALL's 4 MiB again would take 4 s, which a pull of layers already there
    # is told apart from however loaded the machine (a loaded event loop adds tenths of a second)
    async with cold_cluster(tmp_path, 44, preloaded=(SMALL,), bandwidth=MI) as cluster:
        store = cluster.store
        assert store.get("nodes", None, "n")["status"]["images"] == [{"names": [SMALL], "sizeBytes": 4 * MI}]
        store.create("pods", sleeper("never-missing", "example.org/absent:1", "Never"), "default")
        store.create("pods", sleeper("never-present", SMALL, "Never"), "default")
        store.create("pods", sleeper("always", SMALL, "Always"), "default")
        store.create("pods", sleeper("latest", "busybox"), "default")
        assert store.get("pods", "default", "latest")["spec"]["containers"][0]["imagePullPolicy"] == "Always"
        waiting = await wait_for_pod(
            store,
            "default",
            "never-missing",
            lambda p: (
                (p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {}).get("reason") == "ErrImageNeverPull"
            ),
        )
        assert waiting["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == (
            'Container image "example.org/absent:1" is not present with pull policy of Never'
        )
        assert waiting["status"]["phase"] == "Pending"
        warning = next(e for e in events_of(store, "never-missing") if e["reason"] == "ErrImageNeverPull")
        assert warning["type"] == "Warning"
        for name in ("never-present", "always", "latest"):
            await wait_for_pod(store, "default", name, running, timeout=30)  # "latest" pulls 2 MiB: 2 s
        assert [e["reason"] for e in events_of(store, "never-present")][:2] == ["Scheduled", "Pulled"]
        always = [e for e in events_of(store, "always") if e["reason"] in ("Pulling", "Pulled")]
        assert [e["reason"] for e in always] == ["Pulling", "Pulled"] and PULLED.match(always[1]["message"])
        assert seconds(PULLED.match(always[1]["message"]).group(2)) < 2.0  # its layers were there: not 4 s
        assert "Pulling" in [e["reason"] for e in events_of(store, "latest")]


async def test_offloaded_pod_pulls_on_the_donor_at_the_donors_bandwidth(tmp_path):
    config = parse_config(
        {
            "images": {"sizes": {BIG: "60Mi"}},
            "origin": {"nodes": [{"name": "o", "resources": {"nvidia.com/gpu": 1}}], "image_pull_bandwidth": "1Gi", "preloaded_images": []},
            "donors": [
                {
                    "name": "d",
                    "nodes": [{"name": "d-gpu", "resources": {"nvidia.com/gpu": 1}}],
                    "grant": {"cpu": "8", "nvidia.com/gpu": 1},
                    "image_pull_bandwidth": "100Mi",
                    "preloaded_images": [],
                }
            ],
        },
        "<test>",
    )
    async with running_federation(config, state_dir=tmp_path) as fed:
        store = fed.origin.store
        store.create(f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", liqo.namespace_offloading("default"), "default")
        pod = sleeper("off", BIG)
        pod["spec"]["tolerations"] = [liqo.virtual_node_toleration()]
        pod["spec"]["nodeSelector"] = {liqo.TYPE_LABEL: "virtual-node"}
        store.create("pods", pod, "default")
        await wait_for_pod(store, "default", "off", running, timeout=15)
        pulled = await wait_until(
            lambda: next((e["message"] for e in events_of(store, "off") if e["reason"] == "Pulled"), None), what="reflected Pulled event"
        )
        took = seconds(PULLED.match(pulled).group(2))
        assert took >= 0.5, pulled  # 60 MiB at the donor's 100 MiB/s, not the origin's 1 GiB/s
        donor = next(iter(fed.donors.values()))
        assert donor.store.get("nodes", None, "d-gpu")["status"]["images"][0]["names"] == [BIG]
        assert not fed.origin.store.get("nodes", None, "o")["status"].get("images")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"origin.image_pull_bandwidth: must be a non-negative quantity"):
        parse_config({"origin": {"nodes": [{"name": "n"}], "image_pull_bandwidth": "fast"}}, "<t>")
    with pytest.raises(ValueError, match=r"origin.preloaded_images: must be a list of image names"):
        parse_config({"origin": {"nodes": [{"name": "n"}], "preloaded_images": "all"}}, "<t>")
    with pytest.raises(ValueError, match=r"images.sizes.x:1: must be a non-negative quantity"):
        parse_config({"images": {"sizes": {"x:1": "big"}}, "origin": {"nodes": [{"name": "n"}]}}, "<t>")


def test_the_rush_config_pulls_a_cuda_image_in_realistic_time():
    from jupyter_gpuburst.sim.config import DEFAULT_CONFIG, load_config

    config = load_config(DEFAULT_CONFIG.with_name("rush.yaml"))
    image = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"
    assert config.origin.images.preloaded == () and config.donors[0].cluster.images.preloaded == ()
    assert 25 <= config.origin.images.pull_seconds(image) <= 40  # campus mirror
    assert 120 <= config.donors[0].cluster.images.pull_seconds(image) <= 180  # over the WAN
    # the shipped default keeps every image present and pulls instant
    default = load_config()
    assert default.origin.images.preloaded is None and default.origin.images.pull_seconds(image) == 0


def test_scheduler_prefers_the_node_that_has_the_image():
    from jupyter_gpuburst.sim.cluster import node_object
    from jupyter_gpuburst.sim.scheduler import image_locality, image_spread, schedule_one

    warm = node_object("warm", NodeConfig(name="warm", cpu="8", resources={"nvidia.com/gpu": 2}), "127.0.0.1", "t")
    cold = node_object("cold", NodeConfig(name="cold", cpu="8", resources={"nvidia.com/gpu": 2}), "127.0.0.2", "t")
    warm["status"]["images"] = [{"names": [BIG], "sizeBytes": 6 * 1024**3}]
    busy = {"metadata": {"name": "b"}, "spec": {"nodeName": "warm", "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]}}
    pod = {"spec": {"containers": [{"name": "c", "image": BIG, "resources": {"requests": {"cpu": "1"}}}]}}
    # the warm node is half full, the cold one empty: the image wins, as with kube-scheduler
    assert schedule_one(pod, [cold, warm], [busy])[0] == "warm"
    spread = image_spread([cold, warm])
    assert image_locality(pod, warm, spread, 2) == 100.0  # 6 GiB on half the nodes: past the 1000 MiB cap
    assert image_locality(pod, cold, spread, 2) == 0.0
    # without the image anywhere, the emptier node wins as before
    warm["status"]["images"] = []
    assert schedule_one(pod, [cold, warm], [busy])[0] == "cold"
