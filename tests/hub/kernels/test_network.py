"""The README's z2jh values let every user server reach the gpuburst service's kernel API: the
port on the hub Service, the hub's ingress from origin servers and from donors' remapped pod
CIDRs, and user pods' egress to it (z2jh allows only the hub's own port by default); and let a
server reach its GPU kernels' pods on their ZMQ ports, on the origin and on every donor."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import yaml

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub import DEFAULT_SERVICE_PORT
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings

REPO = Path(__file__).resolve().parents[3]
VALUES = yaml.safe_load((REPO / "hub_config" / "values.yaml").read_text())
Z2JH = yaml.safe_load((REPO / "tests" / "reference" / "z2jh" / "values.yaml").read_text())
HUB_API_PORT = 8081


def ports(rule: dict) -> set[int]:
    return {port for p in rule.get("ports") or [] for port in range(p["port"], p.get("endPort", p["port"]) + 1)}


def test_the_hub_service_exposes_the_service_port():
    [extra] = VALUES["hub"]["service"]["extraPorts"]
    assert extra["port"] == extra["targetPort"] == DEFAULT_SERVICE_PORT


def test_origin_servers_may_reach_the_service():
    ingress = VALUES["hub"]["networkPolicy"]["ingress"]
    # z2jh labels user pods (and the proxy) network-access-hub by default
    label = Z2JH["singleuser"]["extraLabels"]
    assert label == {"hub.jupyter.org/network-access-hub": "true"}
    assert any(
        DEFAULT_SERVICE_PORT in ports(rule) and any(src.get("podSelector", {}).get("matchLabels") == label for src in rule["from"])
        for rule in ingress
    )
    # z2jh's user pod policy lets them reach only 8081 on the hub pod: ours adds the service's port
    egress = VALUES["singleuser"]["networkPolicy"]["egress"]
    assert any(
        DEFAULT_SERVICE_PORT in ports(rule)
        and any(dst.get("podSelector", {}).get("matchLabels") == {"app": "jupyterhub", "component": "hub"} for dst in rule["to"])
        for rule in egress
    )


def test_donor_servers_may_reach_the_hub_api_and_the_service():
    ingress = VALUES["hub"]["networkPolicy"]["ingress"]
    blocks = [(ports(rule), ipaddress.ip_network(src["ipBlock"]["cidr"])) for rule in ingress for src in rule["from"] if "ipBlock" in src]
    assert blocks and all({HUB_API_PORT, DEFAULT_SERVICE_PORT} <= p for p, _ in blocks)
    # a remapped pod CIDR is a private range, as Liqo's IPAM chooses them
    assert all(net.is_private for _, net in blocks)


def donor_cidrs() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The donors' remapped pod CIDRs, as the hub's ingress lists them."""
    return {
        ipaddress.ip_network(src["ipBlock"]["cidr"])
        for rule in VALUES["hub"]["networkPolicy"]["ingress"]
        for src in rule["from"]
        if "ipBlock" in src
    }


def test_servers_may_reach_their_kernels_on_every_site():
    # z2jh blocks user pods' egress to private addresses: kernel pods' IPs are private
    assert Z2JH["singleuser"]["networkPolicy"]["egressAllowRules"]["privateIPs"] is False
    settings = GPUKernelSettings()
    # a restarted kernel's pod listens on the other five
    kernel_ports = set(settings.ports(0).values()) | set(settings.ports(1).values())
    assert len(kernel_ports) == 10
    kernel_labels = {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT}
    rules = [rule for rule in VALUES["singleuser"]["networkPolicy"]["egress"] if kernel_ports <= ports(rule)]
    # origin kernels by their pods' label (an egress podSelector matches in the servers' namespace)
    assert any(dst.get("podSelector", {}).get("matchLabels") == kernel_labels for rule in rules for dst in rule["to"])
    # kernels on a donor are reached at their remapped addresses: every donor's CIDR
    reached = {ipaddress.ip_network(dst["ipBlock"]["cidr"]) for rule in rules for dst in rule["to"] if "ipBlock" in dst}
    assert donor_cidrs() and donor_cidrs() <= reached
