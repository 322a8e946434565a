"""Pod addresses: each pod gets its own loopback address (127.x.y.z) as pod IP.

A real pod has its own network namespace, so a server listening on 0.0.0.0 there is private to
the pod; here every process shares the host's network, so 0.0.0.0 in the container's args and env
values is replaced by the pod IP. Without that, two single-user servers (KubeSpawner passes
``--ip=0.0.0.0``) would collide on 8888.
"""

from __future__ import annotations

import errno
import ipaddress
import random
import socket
from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]


class AddressPool:
    """Hands out free loopback addresses from a /16 such as 127.10.0.0/16."""

    def __init__(self, network: str, *, random_start: bool = False):
        self.network = ipaddress.ip_network(network)
        if not self.network.subnet_of(ipaddress.ip_network("127.0.0.0/8")):
            raise ValueError(f"pod network {network} must be inside 127.0.0.0/8 (loopback)")
        hosts = list(self.network.hosts())
        if random_start:
            # Federations started at once by separate processes on one machine share 127/8;
            # starting at a random offset keeps them from racing for the same first address.
            cut = random.randrange(len(hosts))
            hosts = hosts[cut:] + hosts[:cut]
        self._hosts = iter(hosts)
        self._released: list[str] = []

    def allocate(self, ports: Iterable[int] = ()) -> str:
        """The next address on which every port in ``ports`` can still be bound."""
        ports = list(ports)
        while True:
            if self._released:
                ip = self._released.pop(0)
            else:
                try:
                    ip = str(next(self._hosts))
                except StopIteration:
                    raise RuntimeError(f"pod network {self.network} is exhausted") from None
            if all(_port_free(ip, p) for p in ports or [0]):
                return ip

    def release(self, ip: str) -> None:
        self._released.append(ip)


def _port_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                return False
            raise
    return True


def container_ports(container: Obj) -> list[int]:
    return [int(p["containerPort"]) for p in container.get("ports") or [] if p.get("protocol", "TCP") == "TCP"]
