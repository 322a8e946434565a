"""Reading NetworkPolicies as a network plugin would, for the tests of our policies."""

from __future__ import annotations

import ipaddress
from typing import Any

PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
DNS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


def tcp_egress_allowed(policy: dict[str, Any], ip: str, port: int) -> bool:
    """Whether ``policy`` lets its pods open a TCP connection to ip:port, by its ipBlock peers
    only (a pod or namespace selector names no address)."""
    address = ipaddress.ip_address(ip)
    for rule in policy["spec"]["egress"]:
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and p["port"] <= port <= p.get("endPort", p["port"]) for p in ports):
            continue
        for peer in rule.get("to") or []:
            block = peer.get("ipBlock")
            if block and address in ipaddress.ip_network(block["cidr"]):
                if not any(address in ipaddress.ip_network(c) for c in block.get("except") or []):
                    return True
    return False
