"""GPU kernels' keys never leave the origin but for the one donor a kernel runs on, under Liqo's
default reflection policy (DenyList: every Secret of an offloaded namespace is reflected), on a
federation of two donors, with the servers' namespace offloaded to both as the spawner does."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest
import yaml
from helpers.kernels import registry_on_federation

from jupyter_gpuburst.bench.kernels import first_reply
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

HUB_CONFIG = Path(__file__).parents[3] / "hub_config"
HUB_NAMESPACE = "jhub"  # the helm release's namespace in hub_config/values.yaml's commands
GPU_NODE = {"cpu": "8", "memory": "32Gi", "resources": {"nvidia.com/gpu": 1}}
FEDERATION = {
    "origin": {"name": "origin", "nodes": [{"name": "origin-gpu", **GPU_NODE}]},
    "donors": [
        {"name": name, "nodes": [{"name": f"{name}-gpu", **GPU_NODE}], "grant": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}}
        for name in ("donor-1", "donor-2")
    ],
}


def user_namespace() -> str:
    """The namespace the example values put user servers in."""
    values = yaml.safe_load((HUB_CONFIG / "values.yaml").read_text())
    return values["hub"]["config"]["KubeSpawner"]["namespace"]


def secret_text(secret: dict) -> str:
    return json.dumps({k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()})


def donor_secrets(federation, donor: str) -> list[dict]:
    items, _ = federation.donors[donor].store.list("secrets")
    return items


def test_the_example_puts_user_servers_in_a_namespace_apart_from_the_hub_s():
    # the offloaded namespace is the users', not the hub's (whose z2jh Secret holds the cookie
    # secret and the proxy's token): Liqo would reflect that Secret to every donor
    users = user_namespace()
    assert users != HUB_NAMESPACE
    offloading = yaml.safe_load((HUB_CONFIG / "namespace-offloading.yaml").read_text())
    assert offloading["metadata"]["namespace"] == users
    config = (HUB_CONFIG / "jupyterhub_config.py").read_text()
    assert f'"GPUBURST_USER_NAMESPACE", "{users}"' in config


def test_each_donor_s_kernel_namespace_is_offloaded_to_that_donor_alone():
    from jupyter_gpuburst.core.placement import Placement
    from jupyter_gpuburst.hub.kernels import manifests

    docs = [d for d in yaml.safe_load_all((HUB_CONFIG / "donor-kernels.yaml").read_text()) if d]
    (namespace,) = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    placement = Placement("polito-hpc", "polito-hpc", None, "nvidia.com/gpu", 1, "")
    assert namespace == manifests.kernel_namespace(user_namespace(), placement)
    assert {d["metadata"].get("namespace", namespace) for d in docs} == {namespace}
    (offloading,) = [d for d in docs if d["kind"] == liqo.NAMESPACE_OFFLOADING_KIND]
    assert offloading == liqo.namespace_offloading(namespace, "Remote", ["polito-hpc"])
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": HUB_NAMESPACE}]


async def test_no_donor_holds_a_kernel_key_but_its_own_kernel_s_nor_a_hub_secret(tmp_path):
    users = user_namespace()
    async with registry_on_federation(tmp_path, FEDERATION, namespace=users) as reg:
        fed = reg.federation
        store = fed.origin.store
        for ns in (HUB_NAMESPACE, users):
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        hub_secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hub", "namespace": HUB_NAMESPACE},
            "data": {"hub.config.ConfigurableHTTPProxy.auth_token": base64.b64encode(b"proxy-token-" + b"p" * 20).decode()},
        }
        store.create("secrets", hub_secret, HUB_NAMESPACE)
        # the servers' namespace, offloaded to every donor as hub_config/namespace-offloading.yaml does
        offloading = yaml.safe_load((HUB_CONFIG / "namespace-offloading.yaml").read_text())
        store.create(NSOFF, offloading, users)

        origin_key, donor_key = secrets.token_hex(16), secrets.token_hex(16)
        args = dict(user="alice", groups=frozenset(), server_name="", server_pod=None, profile_slug="gpu-1", signature_scheme="hmac-sha256")
        on_origin = await reg.start(key=origin_key, kernel_id="k1", notebook_dir="", **args)
        await reg.wait(on_origin, 60)
        # the origin's one GPU is taken: the next kernel goes to a donor
        on_donor = await reg.start(key=donor_key, kernel_id="k2", notebook_dir="", **args)
        await reg.wait(on_donor, 60)
        assert (on_origin.state, on_donor.state) == ("running", "running"), (on_origin.error, on_donor.error)
        assert on_origin.placement.site == "origin" and on_donor.placement.is_donor
        runs_on = on_donor.placement.cluster_id
        other = next(d for d in fed.donors if d != runs_on)

        # the donor kernel works with its key
        connection = {"transport": "tcp", "ip": reg.pod_ip(on_donor), **on_donor.ports}
        await first_reply(connection, donor_key.encode(), timeout=30)

        # a Secret made after the kernels', in the servers' namespace: once both donors hold it,
        # each donor's reflector has been through every Secret before it
        marker = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "marker", "namespace": users}, "data": {}}
        store.create("secrets", marker, users)
        remote = liqo.remote_namespace_name(users, "origin")
        await wait_until(
            lambda: all(any(s["metadata"]["name"] == "marker" for s in donor_secrets(fed, d)) for d in fed.donors),
            timeout=30,
            what="both donors reflected the marker",
        )
        assert any(s["metadata"]["namespace"] == remote for s in donor_secrets(fed, other))

        for donor in fed.donors:
            held = " ".join(secret_text(s) for s in donor_secrets(fed, donor))
            assert origin_key not in held, f"{donor} holds the origin kernel's key"
            assert "proxy-token-" not in held, f"{donor} holds the hub's Secret"
            assert (donor_key in held) == (donor == runs_on), f"{donor}: the donor kernel's key is where its pod runs, only"


async def test_a_restarted_hub_finds_its_kernels_on_a_donor_in_the_donor_s_namespace(tmp_path):
    from kubernetes_asyncio import client, config

    from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
    from jupyter_gpuburst.hub.kernels.registry import KernelRegistry
    from jupyter_gpuburst.hub.settings import GPUBurstSettings

    async with registry_on_federation(tmp_path) as reg:
        reg.federation.origin.store.create(NSOFF, liqo.namespace_offloading("default"), "default")
        reg.tracker.placer.policy = GPUBurstSettings(strategy="donor-only").policy()
        args = dict(user="alice", groups=frozenset(), server_name="", server_pod=None, profile_slug="gpu-1", signature_scheme="hmac-sha256")
        record = await reg.start(key=secrets.token_hex(16), kernel_id="k1", notebook_dir="", **args)
        await reg.wait(record, 60)
        assert record.state == "running" and record.namespace == "default-kernels-donor-1", record.error

        # another hub process on the same cluster: it knows the servers' namespace only
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(tmp_path / "kubeconfig"), context="origin", client_configuration=configuration)
        async with client.ApiClient(configuration) as api_client:
            tracker = CapacityTracker(client.CoreV1Api(api_client), GPUBurstSettings(), reg.log)
            await tracker.start()
            try:
                core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
                restarted = KernelRegistry(tracker, reg.settings, core, custom, "img", "default", reg.log)
                await wait_until(lambda: tracker.snapshot().donors(), timeout=30, what="the new hub sees the donor")

                def adopted() -> list:
                    restarted._adopt()  # as its reaper does, each sweep
                    return [(r.id, r.namespace) for r in restarted.records.values()]

                await wait_until(
                    lambda: adopted() == [(record.id, record.namespace)],
                    timeout=30,
                    what="the new hub holds the donor kernel's record",
                )
            finally:
                await tracker.stop()


@pytest.mark.parametrize(
    ("policy", "reflected"),
    [("DenyList", {"donor-kernel", "hub"}), ("AllowList", {"donor-kernel"})],
)
def test_what_leaves_the_origin_under_each_of_liqo_s_policies(policy, reflected):
    # the reflector alone, as Liqo's virtual kubelet configures it (offloading.reflection.secret.type)
    from jupyter_gpuburst.core.placement import Placement
    from jupyter_gpuburst.hub.kernels import manifests
    from jupyter_gpuburst.sim.reflection import ConfigurationReflector
    from jupyter_gpuburst.sim.store import Store

    origin, donor = Store(), Store()
    donor.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-origin"}})
    reflector = ConfigurationReflector(origin, donor, "origin", "donor-1", lambda ns: f"{ns}-origin", secret_policy=policy)
    ports = {"shell_port": 50000}
    sites = {
        "origin-kernel": Placement("origin", None, None, "nvidia.com/gpu", 1, ""),
        "donor-kernel": Placement("donor-1", "donor-1", None, "nvidia.com/gpu", 1, ""),
    }
    secrets_ = [manifests.connection_secret(name, "ns", "k" * 32, "hmac-sha256", ports, placement) for name, placement in sites.items()]
    secrets_.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub", "namespace": "ns"}, "data": {}})
    for secret in secrets_:
        reflector.reflect("secrets", secret)
    assert {s["metadata"]["name"] for s in donor.list("secrets")[0]} == reflected
