"""Free TCP ports for processes started later (a local hub, its proxy, a demo or benchmark server).

A port from ``bind(0)`` is drawn from the range the kernel also hands to outgoing connections
(``net.ipv4.ip_local_port_range``). Between choosing it and the server binding it, any client
socket on the machine may take it as its local port, and the server's listen then fails; the
proxy shows how badly: configurable-http-proxy keeps serving its public port with its API
dead, and the hub gives up on it. Ports below that range are never handed out that way, so only
processes choosing ports themselves can still collide, which a random draw makes rare.

A port a browser refuses to open (the Fetch standard's "bad ports", 10080 among them above 10000)
is never chosen either: a hub there answers curl but shows a student ERR_UNSAFE_PORT.

A port is chosen a while before its server binds it (a hub starts its proxy a second or more
later), and processes choosing at the same time (the test suite's workers, a demo beside a
benchmark) could draw the same one: each chosen port is noted for ``RESERVED_S`` in a directory
of this user's, and the others pass over it. The note is a hint: where it cannot be written, the
draw goes on without it.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
# the kernel's default range (Linux) where the file cannot be read
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
LOWEST = 10000  # above the ports services customarily claim
TRIES = 64
RESERVED_S = 120.0  # longer than any server here takes to bind the port it was given
# https://fetch.spec.whatwg.org/#port-blocking: browsers refuse to connect to these
BROWSER_BLOCKED_PORTS = frozenset(
    {1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104}
    | {109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514}
    | {515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720}
    | {1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080}
)


def browser_blocks(port: int) -> bool:
    """True when browsers refuse to open ``port`` (net::ERR_UNSAFE_PORT in chromium)."""
    return port in BROWSER_BLOCKED_PORTS


def ephemeral_range(path: str | None = None) -> tuple[int, int]:
    """(lowest, highest) port the kernel gives outgoing connections."""
    try:
        with open(path or EPHEMERAL_RANGE_FILE, encoding="ascii") as f:
            low, high = (int(v) for v in f.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return (low, high) if 0 < low <= high else DEFAULT_EPHEMERAL_RANGE


def port_is_free(port: int, host: str = "127.0.0.1", reuse_address: bool = True) -> bool:
    """True when a server could listen on ``port`` now.

    With ``reuse_address`` (SO_REUSEADDR, as most servers set it) connections in TIME_WAIT after
    a clean shutdown do not hold the port; a listening socket does, and so does a connected one
    using it as its local port. Without it, TIME_WAIT holds the port too.
    """
    with socket.socket() as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def reservations() -> Path:
    """Where chosen ports are noted (one empty file per port), this user's own."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"jupyter-gpuburst-ports-{uid}"


def reserve(port: int, now: float | None = None) -> bool:
    """Note ``port`` as chosen; False when another choice noted it less than RESERVED_S ago."""
    now = time.time() if now is None else now
    directory = reservations()
    note = directory / str(port)
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        try:
            os.close(os.open(note, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            if now - note.stat().st_mtime < RESERVED_S:
                return False
            os.utime(note, (now, now))  # an old note: its server has long bound the port, or died
    except OSError:
        pass  # no note to be had: a random draw alone
    return True


def free_port(host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A port nothing on ``host`` holds now, outside the ephemeral range where one exists."""
    rng = rng or random.SystemRandom()
    low, high = ephemeral_range()
    # the widest stretch outside the ephemeral range, from LOWEST up
    below, above = (LOWEST, low - 1), (high + 1, 65535)
    start, end = max((below, above), key=lambda r: r[1] - r[0])
    if end - start >= TRIES:
        for _ in range(TRIES):
            port = rng.randint(start, end)
            if browser_blocks(port):
                continue
            # strict: a port still in TIME_WAIT is passed over, for servers without SO_REUSEADDR
            if port_is_free(port, host, reuse_address=False) and reserve(port):
                return port
    while True:  # no room outside the range: the kernel's choice
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if not browser_blocks(port):
            return port


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


__all__ = [
    "BROWSER_BLOCKED_PORTS",
    "browser_blocks",
    "ephemeral_range",
    "free_port",
    "free_ports",
    "port_is_free",
    "reservations",
    "reserve",
]
