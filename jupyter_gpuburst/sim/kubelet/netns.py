"""A network namespace of its own for each pod, where this kubelet may make one (root, iproute2).

Opt-in (``GPUBURST_SIM_NETWORK=namespaces``). By default pods share the host's network, each with
a loopback address of its own as pod IP (``network``): a hub on the host then reaches pods and
pods reach it at 127.0.0.1, with nothing to configure. In a namespace, as on a cluster, a pod
has a private loopback: two pods may both listen on 0.0.0.0:8000 and on 127.0.0.1:8001, as two
JupyterHub pods with their proxies do. Host programs bound to 127.0.0.1 are then out of the
pods' reach, as they would be on a cluster; pods reach the host at any other loopback address
that is not a pod's (the node's, or 127.0.0.2), where a program listens on it or on all.

The pod IP stays a loopback address, so nothing that reaches pods from the host changes. The
wiring is kernel routing only, as a CNI plugin's ptp mode does it:

- a sandbox process (the "pause" container) holds the namespace: a shell in ``unshare --net``
  that waits on a pipe from this kubelet, so the namespace goes when the kubelet does;
- a veth pair: ``gb<uid>`` on the host (a /32 route to the pod IP in the ``local`` table, which
  wins over ``local 127.0.0.0/8``) and ``eth0`` in the pod (the pod IP and 127.0.0.1 on ``lo`` as
  /32s, the rest of 127.0.0.0/8 routed through the node's address, which the host answers ARP
  for as it does for any address of ``local 127.0.0.0/8``, and not for other pods' addresses);
- no address on the host's end, not even the IPv6 link-local one the kernel would give it
  (``addrgenmode none``): the node's address is the host's already (all of 127.0.0.0/8 is), and
  a new address in the host's namespace is a network change to every program that watches for
  one. Chromium does: it fails every request still waiting for a connection with
  ERR_NETWORK_CHANGED, and a JupyterLab that loads then shows half a page;
- ``route_localnet`` on both ends, since loopback addresses may not cross a wire otherwise, and
  ``forwarding`` on the host's end, so that pods reach one another through the host.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path

from jupyter_gpuburst.sim.kubelet.mounts import UNSHARE

MODE_ENV = "GPUBURST_SIM_NETWORK"  # "namespaces": a network namespace per pod; default "shared"
NSENTER = "/usr/bin/nsenter"
POD_INTERFACE = "eth0"
SETUP_TIMEOUT_S = 10.0

# The sandbox: says it is in its namespace, waits for the host's end of the wire, configures
# its own, says so, and holds the namespace until this kubelet closes the pipe (or goes away).
_SANDBOX_SCRIPT = f"""echo up
read go || exit 1
ip -batch - <<EOF || exit 1
link set lo up
address del 127.0.0.1/8 dev lo
address add 127.0.0.1/32 dev lo
address add $0/32 dev lo
link set {POD_INTERFACE} up
route add 127.0.0.0/8 via $1 dev {POD_INTERFACE} onlink src $0
EOF
echo 1 > /proc/sys/net/ipv4/conf/{POD_INTERFACE}/route_localnet || exit 1
echo ready
read _
"""


class NetworkError(Exception):
    """A pod's network could not be made (the kubelet's FailedCreatePodSandBox)."""


def requested() -> bool:
    mode = os.environ.get(MODE_ENV, "shared").strip().lower()
    if mode not in ("shared", "namespaces"):
        raise ValueError(f"{MODE_ENV} must be 'shared' or 'namespaces', not {mode!r}")
    return mode == "namespaces"


@cache
def unavailable() -> str | None:
    """Why pods cannot have network namespaces here; None when they can."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "pod network namespaces need root on Linux"
    if not shutil.which("ip"):
        return "pod network namespaces need iproute2's ip"
    for tool in (UNSHARE, NSENTER):
        if not os.access(tool, os.X_OK):
            return f"pod network namespaces need {tool} (util-linux)"
    try:
        probe = subprocess.run(
            [UNSHARE, "--net", "--", "ip", "link", "add", "gbprobe0", "type", "veth", "peer", "name", "gbprobe1"],
            timeout=10,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot make a network namespace ({exc})"
    if probe.returncode != 0:
        return f"cannot make a network namespace with a veth pair: {probe.stderr.strip() or probe.returncode}"
    return None


def host_interface(pod_uid: str) -> str:
    """The host end's name: unique per pod, within the kernel's 15 characters."""
    return "gb" + pod_uid.replace("-", "")[:13]


class PodNetwork:
    """One pod's network namespace, held by its sandbox process, wired to the host."""

    def __init__(self, sandbox: asyncio.subprocess.Process, interface: str, pod_ip: str):
        self.sandbox = sandbox
        self.interface = interface
        self.pod_ip = pod_ip

    @property
    def path(self) -> str:
        return f"/proc/{self.sandbox.pid}/ns/net"

    def enter_argv(self, argv: list[str]) -> list[str]:
        """``argv`` to start inside this namespace."""
        return [NSENTER, f"--net={self.path}", "--", *argv]

    @classmethod
    async def create(cls, pod_uid: str, pod_ip: str, node_ip: str) -> PodNetwork:
        interface = host_interface(pod_uid)
        sandbox = await asyncio.create_subprocess_exec(
            UNSHARE,
            "--net",
            "--",
            "/bin/sh",
            "-c",
            _SANDBOX_SCRIPT,
            pod_ip,
            node_ip,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # out of reach of signals to the containers' groups
        )
        network = cls(sandbox, interface, pod_ip)
        try:
            await asyncio.wait_for(network._wire(node_ip), SETUP_TIMEOUT_S)
        except BaseException as exc:
            await network.close()
            if isinstance(exc, TimeoutError):
                raise NetworkError(f"pod network setup took over {SETUP_TIMEOUT_S:.0f}s") from None
            raise
        return network

    async def _wire(self, node_ip: str) -> None:
        assert self.sandbox.stdout is not None and self.sandbox.stdin is not None
        if await self.sandbox.stdout.readline() != b"up\n":
            raise NetworkError(f"the sandbox did not start: {await self._stderr()}")
        # one ip process for the host's end (each costs a few ms); the settings matter only
        # once packets flow, after "go"
        await _ip(
            "-batch",
            "-",
            stdin=(
                f"link add {self.interface} type veth peer name {POD_INTERFACE} netns {self.sandbox.pid}\n"
                # no IPv6 link-local address: one turns permanent a second after the link is up,
                # an address change in the host's namespace as any other (the module docstring)
                f"link set {self.interface} addrgenmode none\n"
                f"link set {self.interface} up\n"
                f"route replace {self.pod_ip}/32 dev {self.interface} table local src {node_ip}\n"
            ),
        )
        for setting in ("route_localnet", "forwarding"):
            Path(f"/proc/sys/net/ipv4/conf/{self.interface}/{setting}").write_text("1")
        self.sandbox.stdin.write(b"go\n")
        await self.sandbox.stdin.drain()
        if await self.sandbox.stdout.readline() != b"ready\n":
            raise NetworkError(f"the pod's end of the network failed: {await self._stderr()}")

    async def _stderr(self) -> str:
        assert self.sandbox.stderr is not None
        try:
            if self.sandbox.returncode is None:
                await asyncio.wait_for(self.sandbox.wait(), 1.0)
            return (await self.sandbox.stderr.read(2000)).decode(errors="replace").strip() or f"exit {self.sandbox.returncode}"
        except TimeoutError:
            return "no answer"

    async def close(self) -> None:
        """Delete the wire (its route goes with it) and end the sandbox. Done before the pod IP
        is handed out again: a namespace left to the kernel goes asynchronously, and its route
        would be in the way of the next pod's."""
        try:
            await _ip("link", "del", self.interface)
        except NetworkError:
            pass  # never made, or gone with its namespace
        if self.sandbox.returncode is None:
            try:
                self.sandbox.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        await self.sandbox.wait()


async def _ip(*args: str, stdin: str | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        "ip",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    if proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args[:3])}: {err.decode(errors='replace').strip()[:500]}")
