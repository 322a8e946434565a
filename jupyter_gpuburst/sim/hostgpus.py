"""This machine's NVIDIA GPUs for the emulated origin: found through NVML, labelled as on a cluster.

`gpuburst demo` and `gpuburst sim` take ``--gpus auto|real|simulated``. With GPUs found (auto,
real), the origin's GPU node advertises the host's devices as the NVIDIA device plugin and GPU
feature discovery do: whole GPUs as ``nvidia.com/gpu``, MIG slices as ``nvidia.com/mig-<profile>``
(the "mixed" strategy), labels ``nvidia.com/gpu.product``, ``.memory``, ``.count``; and the node
lists each device's UUID so that the emulated kubelet can hand specific ones to pods
(``sim/kubelet/devices.py``). Donors stay simulated. Every pynvml call goes through the module
attribute, so `gpu.testing.FakeNVML` can stand in for a GPU.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, replace

import pynvml

from jupyter_gpuburst.core.keys import NVIDIA_VISIBLE_DEVICES_ENV
from jupyter_gpuburst.gpu.backend import GPUUnavailable
from jupyter_gpuburst.gpu.nvml import unavailable_reason, visible_devices
from jupyter_gpuburst.sim.config import ClusterConfig, FederationConfig, NodeConfig

log = logging.getLogger(__name__)

GPUS_MODES = ("auto", "real", "simulated")
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
HOST_NODE = "origin-gpu"
# "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb" (also "1c.3g.40gb", a compute instance's share)
_MIG_PROFILE = re.compile(r"MIG\s+((?:\d+c\.)?\d+g\.\d+gb)\s*$")
MiB = 1 << 20


class HostGPUError(Exception):
    """``--gpus real`` where NVML finds no GPU; ``str()`` is the sentence to print."""


@dataclass(frozen=True)
class HostDevice:
    """One device a pod can be given: a whole GPU, or a MIG slice of one."""

    resource: str  # nvidia.com/gpu, or nvidia.com/mig-1g.10gb
    uuid: str  # GPU-..., or MIG-...
    name: str  # NVML's name of the device
    memory_bytes: int
    parent_uuid: str | None = None  # a MIG slice's GPU


@dataclass(frozen=True)
class HostGPUs:
    """What NVML found: the GPUs' names and memory, and the devices pods can be given."""

    gpus: tuple[tuple[str, str, int], ...]  # (uuid, name, memory bytes) per physical GPU
    devices: tuple[HostDevice, ...]

    @property
    def product(self) -> str:
        """GPU feature discovery's ``nvidia.com/gpu.product``: the first GPU's name, dashed."""
        return _label_value(self.gpus[0][1])

    def resources(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dev in self.devices:
            out[dev.resource] = out.get(dev.resource, 0) + 1
        return out

    def device_ids(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for dev in self.devices:
            out.setdefault(dev.resource, []).append(dev.uuid)
        return {res: tuple(ids) for res, ids in out.items()}

    def labels(self) -> dict[str, str]:
        """The node labels GPU feature discovery writes (mixed MIG strategy where slices exist)."""
        labels = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(len(self.gpus)),
            "nvidia.com/gpu.product": self.product,
            "nvidia.com/gpu.memory": str(self.gpus[0][2] // MiB),
        }
        migs = [d for d in self.devices if d.parent_uuid is not None]
        if migs:
            labels["nvidia.com/mig.strategy"] = "mixed"
            for res, count in self.resources().items():
                if res.startswith(MIG_RESOURCE_PREFIX):
                    profile = res.removeprefix("nvidia.com/")
                    memory = next(d.memory_bytes for d in migs if d.resource == res)
                    labels[f"nvidia.com/{profile}.count"] = str(count)
                    labels[f"nvidia.com/{profile}.memory"] = str(memory // MiB)
        return labels

    def summary(self) -> str:
        """One line for the banner: "1 × NVIDIA H100 80GB HBM3 (80 GiB)" and the MIG slices."""
        names: dict[str, int] = {}
        for _uuid, name, memory in self.gpus:
            key = f"{name} ({memory / (1 << 30):.0f} GiB)"
            names[key] = names.get(key, 0) + 1
        text = ", ".join(f"{n} × {key}" for key, n in names.items())
        migs = {res.removeprefix(MIG_RESOURCE_PREFIX): n for res, n in self.resources().items() if res.startswith(MIG_RESOURCE_PREFIX)}
        if migs:
            text += "; MIG slices: " + ", ".join(f"{n} × {profile}" for profile, n in migs.items())
        return text


def _label_value(name: str) -> str:
    """A device name as a label value, as GPU feature discovery writes it ("NVIDIA-H100-80GB-HBM3")."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-_.")
    return value[:63]


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def discover() -> HostGPUs:
    """The host's GPUs and their devices; GPUUnavailable with the reason where there are none.

    ``NVIDIA_VISIBLE_DEVICES`` (UUIDs or indices) keeps the demo to some of the machine's GPUs,
    as it keeps a container to them.
    """
    visible = visible_devices(os.environ.get(NVIDIA_VISIBLE_DEVICES_ENV))
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GPUUnavailable(unavailable_reason(exc)) from exc
    except OSError as exc:
        raise GPUUnavailable(f"NVML library could not be loaded: {exc}") from exc
    try:
        gpus: list[tuple[str, str, int]] = []
        devices: list[HostDevice] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            if visible is not None and not {uuid, str(i)} & visible:
                continue
            name = _text(pynvml.nvmlDeviceGetName(handle))
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            gpus.append((uuid, name, memory))
            slices = _mig_slices(handle, uuid)
            if slices is None:
                devices.append(HostDevice(GPU_RESOURCE, uuid, name, memory))
            else:
                devices.extend(slices)  # a GPU in MIG mode is given out only as its slices
    except pynvml.NVMLError as exc:
        raise GPUUnavailable(unavailable_reason(exc)) from exc
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    if not gpus:
        raise GPUUnavailable(f"NVML found 0 devices{'' if visible is None else f' that {NVIDIA_VISIBLE_DEVICES_ENV} lists'}")
    return HostGPUs(tuple(gpus), tuple(devices))


def _mig_slices(handle, parent_uuid: str) -> list[HostDevice] | None:
    """The MIG slices of a GPU in MIG mode (None where MIG is off or unsupported)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return None
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    slices = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue  # an empty slot
        name = _text(pynvml.nvmlDeviceGetName(mig))
        match = _MIG_PROFILE.search(name)
        if match is None:
            log.warning("MIG slice %r of %s: no profile in its name; not advertised", name, parent_uuid)
            continue
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(mig).total)
        slices.append(HostDevice(f"{MIG_RESOURCE_PREFIX}{match.group(1)}", uuid, name, memory, parent_uuid))
    return slices


def host_gpus(mode: str) -> tuple[HostGPUs | None, str]:
    """(the host's GPUs or None, a sentence saying what was found) for ``--gpus mode``.

    ``simulated``: never looks. ``auto``: the GPUs NVML finds, else None and why. ``real``:
    HostGPUError where NVML finds none.
    """
    if mode not in GPUS_MODES:
        raise ValueError(f"--gpus must be one of {', '.join(GPUS_MODES)}, not {mode!r}")
    if mode == "simulated":
        return None, "simulated (--gpus simulated)"
    try:
        found = discover()
    except GPUUnavailable as exc:
        if mode == "real":
            raise HostGPUError(f"--gpus real, but NVML finds no GPU here: {exc.reason}") from None
        return None, f"simulated: NVML finds no GPU here ({exc.reason})"
    return found, f"this machine's {found.summary()}, on the origin (--gpus simulated turns this off)"


def with_host_gpus(config: FederationConfig, host: HostGPUs) -> FederationConfig:
    """The federation with the host's GPUs on the origin: they replace the origin's first node that
    offers ``nvidia.com/gpu`` (or are added as ``origin-gpu``); where the host has MIG slices, they
    replace the origin's nodes that offer only simulated MIG slices. Donors are left as they are."""
    nodes = list(config.origin.nodes)
    at = next((i for i, n in enumerate(nodes) if GPU_RESOURCE in n.resources), None)
    base = nodes[at] if at is not None else NodeConfig(name=HOST_NODE, cpu="16", memory="64Gi")
    node = replace(
        base,
        count=1,
        resources={**{r: n for r, n in base.resources.items() if r != GPU_RESOURCE}, **host.resources()},
        labels={**{k: v for k, v in base.labels.items() if not k.startswith("nvidia.com/")}, **host.labels()},
        devices=host.device_ids(),
    )
    if at is None:
        nodes.insert(0, node)
    else:
        nodes[at] = node
    if any(res.startswith(MIG_RESOURCE_PREFIX) for res in host.resources()):
        nodes = [n for n in nodes if n is node or not n.resources or not all(r.startswith(MIG_RESOURCE_PREFIX) for r in n.resources)]
    origin: ClusterConfig = replace(config.origin, nodes=tuple(nodes))
    return replace(config, origin=origin)
