"""Each GPU kernel admits its own server only: hub_config/networkpolicy-kernels.yaml lets nothing
into kernel pods, and the policy the hub makes with each kernel (hub/kernels/ingress.py) lets in,
on that kernel's ports, the pod KubeSpawner labels as the server that started it. Judged here by
NetworkPolicy's own rules (policies selecting a pod add up; a pod no Ingress policy selects is
open) over the labels KubeSpawner's own code puts on user pods."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubespawner import KubeSpawner

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import ingress, manifests, prestarted
from jupyter_gpuburst.hub.kernels.files import scratch
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, parse_profile

REPO = Path(__file__).resolve().parents[3]
STATIC = yaml.safe_load((REPO / "hub_config" / "networkpolicy-kernels.yaml").read_text())
K8S_VERSION = kubernetes_validate.latest_version()
ORIGIN = Placement("origin", None, "gpu-0", "nvidia.com/gpu", 1, "1 of 2 free on the origin")
PROFILE = parse_profile({"slug": "gpu-1", "resource": "nvidia.com/gpu", "count": 1})
PORTS = GPUKernelSettings().ports(0)
OTHER_PORTS = GPUKernelSettings().ports(1)  # a restart's
USER, SERVER = "Ann@uni.example", "big run"


def server_pod_labels(user: str, server_name: str) -> dict[str, str]:
    """The labels KubeSpawner's own code (``_build_pod_labels``) puts on a user's server pod."""
    spawner = SimpleNamespace(
        user=SimpleNamespace(name=user),
        name=server_name,
        common_labels=KubeSpawner.common_labels.default(),
        component_label=KubeSpawner.component_label.default(),
    )
    spawner._build_common_labels = partial(KubeSpawner._build_common_labels, spawner)
    return KubeSpawner._build_pod_labels(spawner, {})


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels is judged here"
    return selector.get("matchLabels", {}).items() <= labels.items()


def admitted(policies: list[dict[str, Any]], target: dict[str, str], source: dict[str, str], port: int) -> bool:
    """Whether a TCP connection from a pod labelled ``source`` to ``port`` of a pod labelled
    ``target`` (both in the policies' namespace) is let in."""
    ruling = [p for p in policies if "Ingress" in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], target)]
    if not ruling:
        return True
    for policy in ruling:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(p["port"] <= port <= p.get("endPort", p["port"]) and p.get("protocol", "TCP") == "TCP" for p in ports):
                continue
            peers = rule.get("from")
            if peers is None or any(set(peer) == {"podSelector"} and selects(peer["podSelector"], source) for peer in peers):
                return True
    return False


def kernel_pod(record_id: str = "abc1", name: str = "gpuburst-kernel-abc1-1") -> dict[str, Any]:
    return manifests.kernel_pod(
        name=name,
        namespace="jhub-users",
        record_id=record_id,
        user=USER,
        groups=[],
        server_name=SERVER,
        profile=PROFILE,
        placement=ORIGIN,
        attempts=1,
        image="jupyter/gpu:1",
        ports=PORTS,
        files=scratch(ORIGIN),
        note="",
        secret_name=name,
        server_pod=None,
        grace_seconds=5,
    )


def policy_of(record_id: str = "abc1", name: str = "gpuburst-kernel-abc1-1", user: str = USER, server: str = SERVER) -> dict[str, Any]:
    return ingress.kernel_policy(
        pod_name=name, namespace="jhub-users", pod_uid="uid-1", record_id=record_id, user=user, server_name=server, ports=PORTS
    )


def test_the_kernels_policy_is_valid_and_owned_by_the_kernels_pod():
    policy = policy_of()
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert policy["metadata"]["name"] == "gpuburst-kernel-abc1-1" and policy["metadata"]["namespace"] == "jhub-users"
    [owner] = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "gpuburst-kernel-abc1-1", "uid-1")


def test_the_static_policy_lets_nothing_into_a_kernel():
    assert "Ingress" in STATIC["spec"]["policyTypes"] and not STATIC["spec"].get("ingress")
    own = server_pod_labels(USER, SERVER)
    assert not any(admitted([STATIC], kernel_pod()["metadata"]["labels"], own, port) for port in PORTS.values())


def test_a_kernel_admits_its_own_server_on_its_ports_only():
    policies = [STATIC, policy_of()]
    kernel = kernel_pod()["metadata"]["labels"]
    own = server_pod_labels(USER, SERVER)
    assert all(admitted(policies, kernel, own, port) for port in PORTS.values())
    for port in [*OTHER_PORTS.values(), 8888, 22]:
        assert not admitted(policies, kernel, own, port), port


@pytest.mark.parametrize(
    "user, server",
    [("bob", SERVER), (USER, ""), (USER, "other"), ("ann", SERVER), ("Ann@uni.example-2", SERVER)],
    ids=["another-user", "default-server", "another-named-server", "a-similar-user", "a-longer-user"],
)
def test_no_other_server_reaches_the_kernel(user, server):
    policies = [STATIC, policy_of()]
    other = server_pod_labels(user, server)
    assert not any(admitted(policies, kernel_pod()["metadata"]["labels"], other, port) for port in PORTS.values())
    # and that server reaches a kernel of its own
    assert admitted([STATIC, policy_of(user=user, server=server)], kernel_pod()["metadata"]["labels"], other, PORTS["shell_port"])


def test_a_kernels_policy_selects_its_own_pod_only():
    policy = policy_of()
    assert selects(policy["spec"]["podSelector"], kernel_pod()["metadata"]["labels"])
    other_kernel = kernel_pod("def2", "gpuburst-kernel-def2-1")["metadata"]["labels"]
    assert not selects(policy["spec"]["podSelector"], other_kernel)
    # so another kernel's server is not let into this one by that kernel's policy
    bob = server_pod_labels("bob", "")
    policies = [STATIC, policy, policy_of("def2", "gpuburst-kernel-def2-1", user="bob", server="")]
    assert admitted(policies, other_kernel, bob, PORTS["shell_port"])
    assert not admitted(policies, kernel_pod()["metadata"]["labels"], bob, PORTS["shell_port"])


def test_a_pre_started_kernel_is_reached_by_no_one_until_adopted_and_then_by_its_adopter_only():
    pooled = prestarted.pooled_pod("origin", PROFILE, GPUKernelSettings(), "jupyter/gpu:1", "jhub-users", "gpuburst-warm-pool", [])
    own = server_pod_labels(USER, SERVER)
    # a policy of any kernel selects no waiting one (the pool's pods carry no kernel id)
    assert not any(admitted([STATIC, policy_of()], pooled["metadata"]["labels"], own, port) for port in PORTS.values())
    record = SimpleNamespace(id="abc1", user=USER, groups=frozenset(), attempts=[], server_name=SERVER, kernel_id="k1")
    patch = prestarted.adoption_patch(pooled, record, ORIGIN, None, "adopted")
    labels = {k: v for k, v in {**pooled["metadata"]["labels"], **patch["metadata"]["labels"]}.items() if v is not None}
    assert labels[keys.KERNEL_LABEL] == "abc1"
    assert admitted([STATIC, policy_of(name=pooled["metadata"]["name"])], labels, own, PORTS["shell_port"])
    assert not admitted([STATIC, policy_of(name=pooled["metadata"]["name"])], labels, server_pod_labels("bob", ""), PORTS["shell_port"])


def test_the_servers_labels_are_kubespawners():
    for user, server in [(USER, SERVER), ("ann", ""), ("a--b", "x" * 80)]:
        assert ingress.server_labels(user, server).items() <= server_pod_labels(user, server).items()
