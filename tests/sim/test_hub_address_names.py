"""Name resolution per cluster: a server on a donor reaches the hub at the shipped hub_connect_url.

Each cluster's pods resolve Service names from that cluster's own objects: the donor has only its
own Services and what Liqo reflected from offloaded namespaces. The hub's namespace is never
offloaded, so its Service's name means nothing on the donor; the hub's address in the user
namespace (hub/address) is reflected there under the same name.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import CoreV1Api, DiscoveryV1Api
from traitlets.config import PyFileConfigLoader

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.hub.address import AddressKeeper, HubAddress
from jupyter_gpuburst.sim.kubelet.processes import uts_namespaces
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not uts_namespaces(), reason="no UTS and mount namespaces (not root, or no util-linux): pods use the host's /etc/hosts"
    ),
]
HUB_CONFIG = Path(__file__).resolve().parents[2] / "hub_config"
USERS = "jhub-users"
DONOR_USERS = liqo.remote_namespace_name(USERS, "origin")
RESOLVE = "import socket,sys\nfor n in sys.argv[1:]:\n    try: print(socket.gethostbyname(n))\n    except OSError: print('-')"


def sleeper(name: str, labels: dict | None = None, donor: str | None = None) -> dict:
    spec: dict = {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "python", "command": [sys.executable, "-c", "import time; time.sleep(120)"]}],
    }
    if donor:
        spec["tolerations"] = [liqo.virtual_node_toleration()]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.donor_node_affinity_term(donor)]}
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


@pytest.fixture(scope="module")
def shipped_hub_hosts() -> tuple[str, ...]:
    """The host of hub_connect_url in the shipped values and in jupyterhub_config.py (read outside
    the event loop: install(c) in a running loop would start the hub's services)."""
    values = yaml.safe_load((HUB_CONFIG / "values.yaml").read_text())
    plain = PyFileConfigLoader("jupyterhub_config.py", path=str(HUB_CONFIG)).load_config()
    urls = (values["hub"]["config"]["JupyterHub"]["hub_connect_url"], plain.JupyterHub.hub_connect_url)
    return tuple(sorted({urlsplit(url).hostname for url in urls}))


async def test_a_donor_pod_resolves_the_shipped_hub_url_to_the_hub_pod(federation, shipped_hub_hosts):
    origin, donor = federation.origin.store, federation.donors["donor-1"]
    for ns in ("jhub", USERS):
        origin.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, None)
    # z2jh's hub: a pod in jhub behind the Service "hub" that selects it
    origin.create("pods", sleeper("hub", {"component": "hub"}), "jhub")
    origin.create("services", {"metadata": {"name": "hub"}, "spec": {"selector": {"component": "hub"}, "ports": [{"port": 8081}]}}, "jhub")
    origin.create(NSOFF, liqo.namespace_offloading(USERS), USERS)
    origin.create("pods", sleeper("here"), USERS)
    origin.create("pods", sleeper("there", donor="donor-1"), USERS)
    hub_ip = (await wait_for_pod(origin, "jhub", "hub", is_running_ready, timeout=30))["status"]["podIP"]
    for name in ("here", "there"):
        await wait_for_pod(origin, USERS, name, is_running_ready, timeout=30)

    async def resolve(kubelet, namespace: str, pod: str, *names: str) -> list[str]:
        proc, _ = await kubelet.open_exec(namespace, pod, None, [sys.executable, "-c", RESOLVE, *names], stdin=False, tty=False)
        out, _ = await proc.communicate()
        return out.decode().split()

    async def settled(kubelet, namespace: str, pod: str, names: tuple[str, ...], want: list[str]) -> list[str]:
        # hosts files follow the store after a burst of events; each look starts a process in the pod
        deadline = asyncio.get_running_loop().time() + 20
        while (seen := await resolve(kubelet, namespace, pod, *names)) != want and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        return seen

    full = "hub.jhub.svc.cluster.local"
    hosts = shipped_hub_hosts
    assert await settled(federation.origin.kubelet, USERS, "here", (full,), [hub_ip]) == [hub_ip]
    # the donor has no namespace jhub: the hub's full name resolves to nothing there, whatever the hub does
    assert await resolve(donor.kubelet, DONOR_USERS, "there", full) == ["-"]

    api = await kconfig.new_client_from_config(config_file=str(federation.kubeconfig), context="origin")
    try:
        settings = HubAddress(pod_ip=hub_ip)
        keeper = AddressKeeper(settings, USERS, CoreV1Api(api), DiscoveryV1Api(api))
        assert await keeper.ensure() == ["created Service", "created EndpointSlice"]
        assert await keeper.ensure() == []
        want = [hub_ip] * len(hosts)
        assert await settled(federation.origin.kubelet, USERS, "here", hosts, want) == want
        assert await settled(donor.kubelet, DONOR_USERS, "there", hosts, want) == want
        # what the donor resolves it by: Liqo's copies, under the same names, in the donor's namespace
        assert donor.store.get("services", DONOR_USERS, settings.service_name)["spec"].get("selector") is None
        assert not donor.store.list("services", "jhub")[0]
        copy = donor.store.get("endpointslices.discovery.k8s.io", DONOR_USERS, settings.service_name)
        assert copy["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == liqo.ENDPOINTSLICE_MANAGED_BY

        # a restarted hub has another pod IP: its keeper points the slice there, on both sides
        moved = AddressKeeper(HubAddress(pod_ip="127.0.0.1"), USERS, CoreV1Api(api), DiscoveryV1Api(api))
        assert await moved.ensure() == ["replaced EndpointSlice"]
        assert await settled(donor.kubelet, DONOR_USERS, "there", hosts, ["127.0.0.1"] * len(hosts)) == ["127.0.0.1"] * len(hosts)
    finally:
        await api.close()
