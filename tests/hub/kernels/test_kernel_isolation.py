"""GPU kernel pods are at least as isolated as the user servers they serve.

Network: hub_config/networkpolicy-kernels.yaml gives kernel pods the egress z2jh's default
``singleuser.networkPolicy`` gives user servers (rendered here from the vendored chart defaults,
as the chart's template renders ``egressAllowRules``), and lets nothing in: each kernel's own
policy lets its server in (tests/hub/kernels/test_ingress.py). Pod: Kubernetes' "restricted" Pod Security Standard, and CPU and memory requests
so that no kernel pod is BestEffort.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helpers.netpol import DNS, PRIVATE, tcp_egress_allowed
from kubespawner import KubeSpawner
from traitlets.config import Config

from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests, prestarted
from jupyter_gpuburst.hub.kernels.files import scratch
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, kernel_settings_from_config, parse_profile

REPO = Path(__file__).resolve().parents[3]
POLICY = yaml.safe_load((REPO / "hub_config" / "networkpolicy-kernels.yaml").read_text())
VALUES = yaml.safe_load((REPO / "hub_config" / "values.yaml").read_text())
Z2JH = yaml.safe_load((REPO / "tests" / "reference" / "z2jh" / "values.yaml").read_text())
K8S_VERSION = kubernetes_validate.latest_version()
ORIGIN = Placement("origin", None, "gpu-0", "nvidia.com/gpu", 1, "1 of 2 free on the origin")


def z2jh_egress(allow: dict[str, bool], metadata_ip: str) -> list[dict[str, Any]]:
    """The egress rules z2jh 4.4.0's ``jupyterhub.networkPolicy.renderEgressRules`` writes for
    ``egressAllowRules`` (templates/_helpers-netpol.tpl of the chart)."""
    rules: list[dict[str, Any]] = []
    if allow["dnsPortsCloudMetadataServer"]:
        rules.append({"ports": DNS, "to": [{"ipBlock": {"cidr": f"{metadata_ip}/32"}}]})
    if allow["dnsPortsKubeSystemNamespace"]:
        rules.append({"ports": DNS, "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}]})
    if allow["dnsPortsPrivateIPs"]:
        rules.append({"ports": DNS, "to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE]})
    if allow["nonPrivateIPs"]:
        excepted = PRIVATE + ([] if allow["cloudMetadataServer"] else [f"{metadata_ip}/32"])
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": excepted}}]})
    if allow["privateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE]})
    if allow["cloudMetadataServer"]:
        rules.append({"to": [{"ipBlock": {"cidr": f"{metadata_ip}/32"}}]})
    return rules


def users_egress_allow_rules() -> dict[str, bool]:
    """What user servers may reach: z2jh's defaults, as our values.yaml leaves or changes them."""
    ours = VALUES["singleuser"].get("networkPolicy", {}).get("egressAllowRules", {})
    return {**Z2JH["singleuser"]["networkPolicy"]["egressAllowRules"], **ours}


def user_server_labels() -> dict[str, str]:
    """The labels KubeSpawner puts on every user server (z2jh keeps its defaults)."""
    return {**KubeSpawner.common_labels.default(), "component": KubeSpawner.component_label.default()}


def test_the_policy_is_a_valid_network_policy_that_selects_kernel_pods_only():
    kubernetes_validate.validate(POLICY, K8S_VERSION, strict=True)
    selector = POLICY["spec"]["podSelector"]["matchLabels"]
    kernel = manifests.kernel_labels(ORIGIN)
    assert selector.items() <= kernel.items()
    # a pre-started kernel waiting in its pool is a kernel pod to the policy too
    assert selector.items() <= pooled_kernel_pod()["metadata"]["labels"].items()
    # and not the user servers, which z2jh's own policy selects
    server = user_server_labels()
    assert not selector.items() <= server.items()
    assert set(POLICY["spec"]["policyTypes"]) == {"Ingress", "Egress"}


def test_kernels_may_reach_exactly_what_user_servers_may():
    metadata_ip = Z2JH["singleuser"]["cloudMetadata"]["ip"]
    assert POLICY["spec"]["egress"] == z2jh_egress(users_egress_allow_rules(), metadata_ip)
    # what that means for a student's code in a GPU kernel
    assert tcp_egress_allowed(POLICY, "151.101.0.223", 443)  # pypi.org
    assert not tcp_egress_allowed(POLICY, metadata_ip, 80)  # the cloud metadata server: credentials
    assert not tcp_egress_allowed(POLICY, "10.96.0.1", 443)  # the cluster's API server, any private address
    assert not tcp_egress_allowed(POLICY, "192.168.1.10", 8081)  # the hub
    assert tcp_egress_allowed(POLICY, "10.96.0.10", 53)  # DNS


def test_the_shared_policy_lets_nothing_in_and_no_donor_range_anywhere():
    # each kernel's own policy (hub/kernels/ingress.py, tests/hub/kernels/test_ingress.py)
    # admits its server: this one, selecting every kernel pod, admits no one
    assert "Ingress" in POLICY["spec"]["policyTypes"]
    assert not POLICY["spec"].get("ingress")


def kernel_pod(profile: dict[str, Any], uid: int | None = 1000) -> dict[str, Any]:
    settings = GPUKernelSettings()
    return manifests.kernel_pod(
        name="gpuburst-kernel-abc-1",
        namespace="jhub",
        record_id="abc",
        user="ann",
        groups=[],
        server_name="",
        profile=parse_profile(profile),
        placement=ORIGIN,
        attempts=1,
        image="jupyter/gpu:1",
        ports=settings.ports(),
        files=scratch(ORIGIN),
        note="",
        secret_name="gpuburst-kernel-abc-1",
        server_pod=None,
        grace_seconds=5,
        uid=uid,
    )


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Kubernetes' "restricted" Pod Security Standard (v1.30), check by check."""
    spec = pod["spec"]
    pod_ctx = spec.get("securityContext") or {}
    out = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            out.append(flag)
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    for volume in spec.get("volumes") or []:
        if not set(volume) - {"name"} <= allowed_volumes:
            out.append(f"volume {volume['name']}")
    for container in spec["containers"] + (spec.get("initContainers") or []):
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            out.append("privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append("allowPrivilegeEscalation")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append("capabilities")
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            out.append("runAsNonRoot")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            out.append("runAsUser")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append("seccompProfile")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            out.append("hostPort")
    return out


def pooled_kernel_pod() -> dict[str, Any]:
    """A pre-started kernel of a warm pool (hub/kernels/prestarted), before anyone adopts it."""
    profile = parse_profile({"slug": "gpu-1", "display_name": "1 GPU", "resource": "nvidia.com/gpu", "count": 1})
    return prestarted.pooled_pod("origin", profile, GPUKernelSettings(), "jupyter/gpu:1", "jhub", "gpuburst-warm-pool", [])


@pytest.mark.parametrize("uid", [1000, None, "pooled"], ids=["uid", "image-user", "pre-started"])
def test_kernel_pods_meet_the_restricted_pod_security_standard(uid):
    pod = pooled_kernel_pod() if uid == "pooled" else kernel_pod({"cpu": "2", "memory": "8Gi"}, uid=uid)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert restricted_violations(pod) == []
    # the check itself finds what the standard forbids
    pod["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False}
    assert "capabilities" in restricted_violations(pod)


def qos(pod: dict[str, Any]) -> str:
    """The pod's QoS class, as the kubelet computes it (cpu and memory only)."""
    containers = pod["spec"]["containers"]
    requests = [c["resources"].get("requests", {}) for c in containers]
    limits = [c["resources"].get("limits", {}) for c in containers]
    if not any(r.get(k) or lim.get(k) for r, lim in zip(requests, limits, strict=True) for k in ("cpu", "memory")):
        return "BestEffort"
    guaranteed = all(
        lim.get(k) and r.get(k, lim.get(k)) == lim[k] for r, lim in zip(requests, limits, strict=True) for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def test_no_kernel_pod_is_best_effort():
    # a profile with nothing said: small requests, no limit
    assert qos(kernel_pod({})) == "Burstable"
    assert qos(kernel_pod({"cpu": "2", "memory": "8Gi"})) == "Guaranteed"
    pod = kernel_pod({"cpu": "2", "memory": "8Gi", "cpu_limit": "4", "memory_limit": "16Gi"})
    assert qos(pod) == "Burstable"
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert resources["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_derived_kernel_profiles_take_the_server_profiles_cpu_and_memory():
    """The example values' profiles: each GPU kernel gets its server profile's guarantees and limits."""
    c = Config()
    c.KubeSpawner.profile_list = VALUES["singleuser"]["profileList"]
    profiles = {p.slug: p for p in kernel_settings_from_config(c).kernel_profiles().values()}
    gpu_1 = profiles["gpu-1"]
    assert (gpu_1.cpu, gpu_1.cpu_limit, gpu_1.memory, gpu_1.memory_limit) == ("4", "8", "24Gi", "32Gi")
    for profile in profiles.values():
        pod = kernel_pod(
            {
                "resource": profile.resource,
                "cpu": profile.cpu,
                "cpu_limit": profile.cpu_limit,
                "memory": profile.memory,
                "memory_limit": profile.memory_limit,
            }
        )
        assert qos(pod) != "BestEffort"
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_an_explicit_profile_without_resources_gets_the_spawners_hub_wide_ones():
    c = Config()
    c.KubeSpawner.mem_guarantee = "2G"
    c.KubeSpawner.cpu_limit = 4
    c.GPUKernelSettings.profiles = [{"slug": "one-gpu"}, {"slug": "big", "memory": "64Gi"}]
    profiles = kernel_settings_from_config(c).kernel_profiles()
    assert (profiles["one-gpu"].memory, profiles["one-gpu"].cpu_limit) == ("2Gi", "4")
    # a profile that says anything about CPU or memory is taken as written
    assert (profiles["big"].memory, profiles["big"].cpu_limit) == ("64Gi", "")
