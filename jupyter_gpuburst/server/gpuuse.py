"""What a server's GPUs, or one GPU kernel's, used since the last report to the hub: right-sizing's figures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class UseSince:
    """Peak GPU memory, the devices' memory, peak utilization and a running sum for the mean,
    over the samples since ``take()`` last emptied it."""

    def __init__(self) -> None:
        self.peak_memory_bytes: int | None = None
        self.memory_total_bytes: int | None = None
        self.peak_utilization: float | None = None
        self.utilization_sum = 0.0
        self.utilization_samples = 0

    def add(self, memory_used: int | None, memory_total: int | None, utilization: float | None) -> None:
        """One sample of all the devices together: memory summed, utilization their mean."""
        if memory_used is not None:
            self.peak_memory_bytes = max(self.peak_memory_bytes or 0, int(memory_used))
        if memory_total is not None:
            self.memory_total_bytes = max(self.memory_total_bytes or 0, int(memory_total))
        if utilization is not None:
            value = min(1.0, max(0.0, float(utilization)))
            self.peak_utilization = max(self.peak_utilization or 0.0, value)
            self.utilization_sum += value
            self.utilization_samples += 1

    def add_devices(self, devices: Iterable[Mapping[str, Any]]) -> None:
        """One sample of the GPU readings (``memory_used_bytes``, ``memory_total_bytes``, ``utilization``)."""
        devices = list(devices)
        if not devices:
            return
        utilizations = [float(d["utilization"]) for d in devices if isinstance(d.get("utilization"), int | float)]
        self.add(
            sum(int(d.get("memory_used_bytes") or 0) for d in devices),
            sum(int(d.get("memory_total_bytes") or 0) for d in devices),
            sum(utilizations) / len(utilizations) if utilizations else None,
        )

    def take(self) -> dict[str, Any] | None:
        """The figures for a report (None when nothing was sampled), and start again."""
        if self.peak_memory_bytes is None and not self.utilization_samples:
            return None
        figures = {
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "peak_utilization": None if self.peak_utilization is None else round(self.peak_utilization, 4),
            "utilization_sum": round(self.utilization_sum, 4),
            "utilization_samples": self.utilization_samples,
        }
        self.__init__()  # type: ignore[misc]
        return figures

    def give_back(self, figures: Mapping[str, Any] | None) -> None:
        """A report that did not reach the hub: its figures count in the next one."""
        if not figures:
            return
        self.add(figures.get("peak_memory_bytes"), figures.get("memory_total_bytes"), None)
        if figures.get("peak_utilization") is not None:
            self.peak_utilization = max(self.peak_utilization or 0.0, float(figures["peak_utilization"]))
        self.utilization_sum += float(figures.get("utilization_sum") or 0.0)
        self.utilization_samples += int(figures.get("utilization_samples") or 0)


def kernel_use(gpu: Mapping[str, Any]) -> dict[str, Any] | None:
    """A GPU kernel's figures from its latest ``usage_reply`` (its pod's own GPU reading, one
    sample per report), or None when its pod reads no GPU."""
    used = gpu.get("memory_used_bytes")
    if isinstance(used, bool) or not isinstance(used, int | float):
        return None
    use = UseSince()
    total = gpu.get("memory_total_bytes")
    util = gpu.get("utilization")
    use.add(
        int(used),
        int(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
        float(util) if isinstance(util, int | float) and not isinstance(util, bool) else None,
    )
    return use.take()
