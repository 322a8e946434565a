"""Kernel <-> GPU attribution: which kernel holds how much memory on which GPU.

A kernel's processes are its own pid plus every descendant (a `!python train.py`, DataLoader
workers). The driver's compute-process pids are matched against them directly first; when the
driver reports pids of another PID namespace (older drivers report host pids inside containers),
the aliases in `NSpid` of /proc/<pid>/status are tried. What cannot be matched is reported as
"unattributed" rather than guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

from jupyter_gpuburst.gpu.backend import GPUProcess, KernelRef


def process_tree(pid: int) -> set[int]:
    """`pid` and all its descendants; empty when the process is gone or invisible."""
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return set()


def namespace_aliases(pid: int, proc_root: str = "/proc") -> set[int]:
    """The pids of one process in every PID namespace visible from here (NSpid), itself included."""
    try:
        with open(f"{proc_root}/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return {int(v) for v in line.split()[1:] if v.isdigit()}
    except OSError:
        pass
    return {pid}


@dataclass(frozen=True)
class KernelPids:
    """A kernel with the local pids of its whole process tree and their namespace aliases."""

    kernel: KernelRef
    pids: frozenset[int]
    aliases: frozenset[int]


def resolve(
    kernels: Iterable[KernelRef],
    tree: Callable[[int], set[int]] = process_tree,
    aliases: Callable[[int], set[int]] = namespace_aliases,
) -> list[KernelPids]:
    """Expand each kernel's pid to its process tree (blocking /proc reads: call off the event loop)."""
    resolved = []
    for k in kernels:
        pids = tree(k.pid) if k.pid is not None else set()
        alias_set: set[int] = set()
        for pid in pids:
            alias_set |= aliases(pid)
        resolved.append(KernelPids(k, frozenset(pids), frozenset(alias_set - pids)))
    return resolved


def _add_memory(total: int | None, more: int | None, first: bool) -> int | None:
    """Sum of known per-process memory; None only while nothing known has been added."""
    if first or total is None:
        return more
    if more is None:
        return total
    return total + more


def attribute(
    kernels: Sequence[KernelPids],
    processes: Sequence[GPUProcess],
    verify: Callable[[int], bool] = lambda pid: True,
) -> tuple[list[dict], list[dict]]:
    """(kernels JSON with per-GPU memory, unattributed processes JSON) as the gpus API returns them.

    Memory per kernel and GPU is the sum over its processes; it is null only when the driver
    reported no per-process memory for any of them.
    """
    direct: dict[int, int] = {}
    aliased: dict[int, int] = {}
    for i, kp in enumerate(kernels):
        for pid in kp.pids:
            direct.setdefault(pid, i)
        for pid in kp.aliases:
            aliased.setdefault(pid, i)

    per_kernel: list[dict[str, int | None]] = [{} for _ in kernels]
    unattributed: list[dict] = []
    for proc in processes:
        owner = None
        if proc.pid is not None:
            owner = direct.get(proc.pid)
            if owner is not None and not verify(proc.pid):
                owner = None  # same number, different process: a pid from another namespace
            if owner is None:
                owner = aliased.get(proc.pid)
        if owner is None:
            unattributed.append({"pid": proc.pid, "gpu_uuid": proc.gpu_uuid, "memory_used_bytes": proc.memory_used_bytes})
            continue
        gpus = per_kernel[owner]
        first = proc.gpu_uuid not in gpus
        gpus[proc.gpu_uuid] = _add_memory(gpus.get(proc.gpu_uuid), proc.memory_used_bytes, first)

    out = []
    for kp, gpus in zip(kernels, per_kernel, strict=True):
        out.append(
            {
                "kernel_id": kp.kernel.kernel_id,
                "name": kp.kernel.name,
                "notebook": kp.kernel.notebook,
                "gpus": [{"uuid": uuid, "memory_used_bytes": mem} for uuid, mem in gpus.items()],
            }
        )
    return out, unattributed


__all__ = ["KernelPids", "attribute", "namespace_aliases", "process_tree", "resolve"]
