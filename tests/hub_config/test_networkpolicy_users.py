"""hub_config/networkpolicy-users.yaml gives user servers in the user namespace what z2jh's
singleuser policy gives them in the release's namespace, where z2jh creates it and no server runs.

The expected policy is z2jh 4.4.0's templates/singleuser/netpol.yaml (and _helpers-netpol.tpl's
``renderEgressRules``) rendered here for hub_config/values.yaml merged over the vendored chart
defaults, with z2jh's own pods looked for in the hub's namespace; so a change to
``singleuser.networkPolicy`` in the values that the file does not follow fails here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helpers.netpol import DNS, PRIVATE, tcp_egress_allowed
from kubespawner import KubeSpawner

from hub_config.readme import command

REPO = Path(__file__).resolve().parents[2]
POLICY = yaml.safe_load((REPO / "hub_config" / "networkpolicy-users.yaml").read_text())
VALUES = yaml.safe_load((REPO / "hub_config" / "values.yaml").read_text())
Z2JH = yaml.safe_load((REPO / "tests" / "reference" / "z2jh" / "values.yaml").read_text())
K8S_VERSION = kubernetes_validate.latest_version()
# z2jh's pods: every other pod a rule of the values selects (GPU kernels) lives with the servers
Z2JH_COMPONENTS = {"hub", "proxy", "autohttps"}


def helm_release() -> tuple[str, str]:
    """The release name and namespace of the install guide's helm command."""
    args = command("helm upgrade --install")
    return args[3], args[args.index("-n") + 1]


RELEASE, HUB_NAMESPACE = helm_release()


def in_namespace(name: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def z2jh_pods(component: str) -> dict[str, Any]:
    """z2jh's ``jupyterhub.matchLabels`` for a component of the release."""
    return {"matchLabels": {"component": component, "app": "jupyterhub", "release": RELEASE}}


def moved(rules: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Rules written for the release's namespace, as seen from the user namespace: a peer that
    selects z2jh's pods by podSelector alone finds them in the hub's namespace."""
    rules = copy.deepcopy(rules)
    for rule in rules:
        for peer in rule.get(key) or []:
            labels = peer.get("podSelector", {}).get("matchLabels", {})
            if labels.get("component") in Z2JH_COMPONENTS and "namespaceSelector" not in peer:
                peer["namespaceSelector"] = in_namespace(HUB_NAMESPACE)
    return rules


def singleuser_settings() -> tuple[dict[str, Any], str]:
    """``singleuser.networkPolicy`` and the metadata server's IP, our values over z2jh's defaults."""
    ours = VALUES["singleuser"]
    netpol = {**Z2JH["singleuser"]["networkPolicy"], **ours.get("networkPolicy", {})}
    netpol["egressAllowRules"] = {
        **Z2JH["singleuser"]["networkPolicy"]["egressAllowRules"],
        **ours.get("networkPolicy", {}).get("egressAllowRules", {}),
    }
    ip = {**Z2JH["singleuser"]["cloudMetadata"], **ours.get("cloudMetadata", {})}["ip"]
    return netpol, ip


def z2jh_ingress(netpol: dict[str, Any]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    if netpol["allowedIngressPorts"]:
        rules.append({"ports": [{"port": port} for port in netpol["allowedIngressPorts"]]})
    labelled = {"hub.jupyter.org/network-access-singleuser": "true"}
    # z2jh's podSelector alone: the labelled pods of its own namespace, the hub's
    sources: list[dict[str, Any]] = [{"podSelector": {"matchLabels": labelled}, "namespaceSelector": in_namespace(HUB_NAMESPACE)}]
    if netpol["interNamespaceAccessLabels"] == "accept":
        sources = [{"podSelector": {"matchLabels": labelled}, "namespaceSelector": {"matchLabels": {}}}]
        sources.append({"namespaceSelector": {"matchLabels": labelled}})
    rules.append({"ports": [{"port": "notebook-port"}], "from": sources})
    return rules + moved(netpol["ingress"], "from")


def z2jh_egress(netpol: dict[str, Any], metadata_ip: str) -> list[dict[str, Any]]:
    allow = netpol["egressAllowRules"]
    rules: list[dict[str, Any]] = [
        {"to": [{"podSelector": z2jh_pods("hub")}], "ports": [{"port": 8081}]},
        {"to": [{"podSelector": z2jh_pods("proxy")}], "ports": [{"port": 8000}]},
        {"to": [{"podSelector": z2jh_pods("autohttps")}], "ports": [{"port": 8080}, {"port": 8443}]},
    ]
    dns: list[dict[str, Any]] = []
    if allow["dnsPortsCloudMetadataServer"]:
        dns.append({"ipBlock": {"cidr": f"{metadata_ip}/32"}})
    if allow["dnsPortsKubeSystemNamespace"]:
        dns.append({"namespaceSelector": in_namespace("kube-system")})
    if allow["dnsPortsPrivateIPs"]:
        dns += [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE]
    if dns:
        rules.append({"ports": DNS, "to": dns})
    if allow["nonPrivateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [*PRIVATE, f"{metadata_ip}/32"]}}]})
    if allow["privateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE]})
    if allow["cloudMetadataServer"]:
        rules.append({"to": [{"ipBlock": {"cidr": f"{metadata_ip}/32"}}]})
    return moved(rules + netpol["egress"], "to")


def test_the_policy_validates_strictly():
    assert kubernetes_validate.validate(POLICY, K8S_VERSION, strict=True) == ".".join(K8S_VERSION.split(".")[:2])
    broken = copy.deepcopy(POLICY)
    broken["spec"]["egress"][0]["too"] = broken["spec"]["egress"][0].pop("to")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_it_selects_the_user_servers_where_they_run():
    assert POLICY["metadata"]["namespace"] == VALUES["hub"]["config"]["KubeSpawner"]["namespace"]
    assert POLICY["metadata"]["namespace"] != HUB_NAMESPACE
    # the labels z2jh's hub config gives every user server: common_labels app and release
    server = {"app": "jupyterhub", "release": RELEASE, "component": KubeSpawner.component_label.default()}
    assert POLICY["spec"]["podSelector"] == {"matchLabels": server}
    assert POLICY["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_ingress_is_z2jhs_for_the_example_values():
    netpol, _ = singleuser_settings()
    assert POLICY["spec"]["ingress"] == z2jh_ingress(netpol)


def test_egress_is_z2jhs_plus_the_example_values_extras():
    netpol, ip = singleuser_settings()
    assert netpol["egress"], "the example values add the gpuburst service and the GPU kernels"
    assert POLICY["spec"]["egress"] == z2jh_egress(netpol, ip)


@pytest.mark.parametrize(
    ("ip", "port", "allowed"),
    [
        ("140.105.1.1", 443, True),  # the internet: pip install, datasets
        ("169.254.169.254", 80, False),  # the cloud metadata server
        ("10.96.0.1", 443, False),  # the API server's Service
        ("192.168.1.10", 22, False),  # anything else private
        ("10.71.3.4", 50007, True),  # a GPU kernel on the donor, by its remapped pod address
        ("10.71.3.4", 8888, False),  # nothing else in the donor's range
        ("10.96.0.10", 53, True),  # DNS
    ],
)
def test_a_student_reaches_the_internet_and_kernels_but_no_other_private_address(ip, port, allowed):
    assert tcp_egress_allowed(POLICY, ip, port) is allowed


def test_z2jhs_pods_are_looked_for_in_the_hubs_namespace_and_kernels_in_the_users():
    peers = [peer for rule in POLICY["spec"]["egress"] for peer in rule.get("to") or []]
    peers += [peer for rule in POLICY["spec"]["ingress"] for peer in rule.get("from") or []]
    selecting = [peer for peer in peers if "podSelector" in peer]
    for peer in selecting:
        component = peer["podSelector"]["matchLabels"].get("component")
        expected = in_namespace(HUB_NAMESPACE) if component != "gpuburst-kernel" else None
        assert peer.get("namespaceSelector") == expected, peer
    assert any(p["podSelector"]["matchLabels"].get("component") == "gpuburst-kernel" for p in selecting)
