"""The kubelet's managed hosts file of a pod (bound over /etc/hosts where it has a mount
namespace of its own)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


@cache
def _host_entries() -> str:
    try:
        return Path("/etc/hosts").read_text()
    except OSError:
        return "127.0.0.1\tlocalhost\n"


def write_hosts_file(
    path: Path,
    pod_ip: str,
    hostname: str,
    subdomain: str | None,
    namespace: str,
    aliases: list[Obj],
    services: tuple[str, ...] | list[str] = (),
) -> Path:
    """The kubelet's managed hosts file: the host's entries, then the pod's own name and
    ``hostAliases`` (the host's are kept: here the pod shares the host's network), then the
    Services' names (``servicenames``). Rewritten in place, so a bind of it sees each update."""
    base = _host_entries()
    names = [hostname] if not subdomain else [f"{hostname}.{subdomain}.{namespace}.svc.cluster.local", hostname]
    lines = ["# Kubernetes-managed hosts file (emulated kubelet).", base.rstrip("\n"), f"{pod_ip}\t{' '.join(names)}"]
    for alias in aliases or []:
        lines.append(f"{alias.get('ip')}\t{' '.join(alias.get('hostnames') or [])}")
    lines.extend(services)
    path.write_text("\n".join(lines) + "\n")
    return path
