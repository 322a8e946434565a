"""The federation's YAML configuration: clusters, nodes, GPUs (MIG layouts too), donors and grants.

Example (the shipped default is ``default.yaml`` next to this module)::

    origin:
      name: origin
      nodes:
        - {name: gpu-a, count: 1, cpu: "16", memory: 64Gi, resources: {nvidia.com/gpu: 2}}
    donors:
      - name: donor-1
        nodes:
          - {name: gpu, count: 2, cpu: "32", memory: 128Gi, resources: {nvidia.com/gpu: 4}}
        grant: {cpu: "32", memory: 128Gi, nvidia.com/gpu: 8}

Image pulls (``sim/kubelet/images.py``): ``images`` sizes images (``sizes``, ``default_size``);
each cluster may set ``image_pull_bandwidth`` (bytes per second per node, a quantity such as
``100Mi``; none: pulls take no time) and ``preloaded_images`` (on its nodes from the start;
absent: every image is)::

    images:
      sizes: {quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07: 6Gi}
      default_size: 200Mi
    origin: {nodes: [...], image_pull_bandwidth: 200Mi, preloaded_images: []}

A node may list its devices' IDs per resource (``devices: {nvidia.com/gpu: [GPU-..., ...]}``,
as many as it offers): the kubelet then hands specific ones to each pod as the NVIDIA device
plugin does (``NVIDIA_VISIBLE_DEVICES``); ``--gpus auto`` fills them in from this machine's GPUs
(``hostgpus``).

Every error names the file and the field, e.g. ``default.yaml: donors[0].grant.nvidia.com/gpu:
must be a non-negative quantity, got 'x'``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils.quantity import parse_quantity

from jupyter_gpuburst.sim.kubelet.images import DEFAULT_IMAGE_SIZE, ImageSettings

DEFAULT_CONFIG = Path(str(resources.files(__package__) / "default.yaml"))
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RESOURCE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class ConfigError(ValueError):
    """A bad configuration: ``str()`` names the file and the field."""

    def __init__(self, source: str, path: str, message: str):
        self.source, self.path, self.message = source, path, message
        super().__init__(f"{source}: {path}: {message}" if path else f"{source}: {message}")


@dataclass(frozen=True)
class NodeConfig:
    """One node (``count`` > 1 makes ``name-1`` .. ``name-N``)."""

    name: str
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    resources: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    count: int = 1
    # resource -> the IDs of the node's devices of it (GPU or MIG UUIDs), handed to pods one
    # each as the NVIDIA device plugin does; a resource listed here has as many as it counts
    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [self.name] if self.count == 1 else [f"{self.name}-{i}" for i in range(1, self.count + 1)]


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    nodes: tuple[NodeConfig, ...]
    cluster_id: str = ""
    images: ImageSettings = field(default_factory=ImageSettings)

    @property
    def id(self) -> str:
        """The Liqo cluster id (defaults to the name)."""
        return self.cluster_id or self.name


@dataclass(frozen=True)
class DonorConfig:
    cluster: ClusterConfig
    grant: dict[str, str]


@dataclass(frozen=True)
class FederationConfig:
    origin: ClusterConfig
    donors: tuple[DonorConfig, ...] = ()
    source: str = "<config>"


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(self.source, path, message)

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{path}.{key}" if path else str(key), f"unknown field; expected one of {', '.join(sorted(allowed))}")
        for key in sorted(required):
            if key not in value:
                raise self.fail(f"{path}.{key}" if path else key, "required field is missing")
        return value

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not _NAME.match(value) or len(value) > 63:
            raise self.fail(path, f"must be a DNS label (lower case letters, digits, '-'), got {value!r}")
        return value

    def quantity(self, value: Any, path: str) -> str:
        try:
            if isinstance(value, bool) or parse_quantity(value) < 0:
                raise ValueError
        except (ValueError, TypeError):
            raise self.fail(path, f"must be a non-negative quantity, got {value!r}") from None
        return str(value)

    def count(self, value: Any, path: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(path, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def resources(self, value: Any, path: str, integer: bool) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping of resource name to amount, got {type(value).__name__}")
        out = {}
        for res, amount in value.items():
            if not isinstance(res, str) or not _RESOURCE.match(res):
                raise self.fail(f"{path}.{res}", "is not a valid resource name")
            out[res] = self.count(amount, f"{path}.{res}") if integer else self.quantity(amount, f"{path}.{res}")
        return out

    def node(self, value: Any, path: str) -> NodeConfig:
        m = self.mapping(value, path, {"name", "count", "cpu", "memory", "pods", "resources", "labels", "devices"}, {"name"})
        labels = m.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise self.fail(f"{path}.labels", "must be a mapping of strings to strings")
        resources = self.resources(m.get("resources"), f"{path}.resources", integer=True)
        count = self.count(m.get("count", 1), f"{path}.count", 1)
        devices = self.devices(m.get("devices"), f"{path}.devices", resources, count)
        return NodeConfig(
            name=self.name(m["name"], f"{path}.name"),
            cpu=self.quantity(m.get("cpu", "8"), f"{path}.cpu"),
            memory=self.quantity(m.get("memory", "32Gi"), f"{path}.memory"),
            pods=self.count(m.get("pods", 110), f"{path}.pods", 1),
            resources=resources,
            labels=dict(labels),
            count=count,
            devices=devices,
        )

    def devices(self, value: Any, path: str, resources: dict[str, int], count: int) -> dict[str, tuple[str, ...]]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping of resource name to a list of device IDs, got {type(value).__name__}")
        if count != 1:
            raise self.fail(path, "needs a node of its own (count: 1): a device belongs to one node")
        out: dict[str, tuple[str, ...]] = {}
        seen: set[str] = set()
        for res, ids in value.items():
            where = f"{path}.{res}"
            if res not in resources:
                raise self.fail(where, "is not one of the node's resources")
            if not isinstance(ids, list) or not all(isinstance(i, str) and i.strip() and "," not in i for i in ids):
                raise self.fail(where, "must be a list of device IDs (non-empty strings without commas)")
            if len(ids) != resources[res]:
                raise self.fail(where, f"lists {len(ids)} devices but the node offers {resources[res]}")
            if seen & set(ids) or len(set(ids)) != len(ids):
                raise self.fail(where, "lists a device twice")
            seen.update(ids)
            out[res] = tuple(ids)
        return out

    def cluster(self, value: Any, path: str, default_name: str | None = None) -> ClusterConfig:
        allowed = {"name", "cluster_id", "nodes", "image_pull_bandwidth", "preloaded_images"} | (
            {"grant"} if path.startswith("donors") else set()
        )
        m = self.mapping(value, path, allowed, {"nodes"} | (set() if default_name else {"name"}))
        nodes = m["nodes"]
        if not isinstance(nodes, list) or not nodes:
            raise self.fail(f"{path}.nodes", "must be a non-empty list of nodes")
        parsed = tuple(self.node(n, f"{path}.nodes[{i}]") for i, n in enumerate(nodes))
        seen: set[str] = set()
        for i, n in enumerate(parsed):
            for node_name in n.names():
                if node_name in seen:
                    raise self.fail(f"{path}.nodes[{i}].name", f"node name {node_name!r} is used twice")
                seen.add(node_name)
        name = self.name(m.get("name", default_name), f"{path}.name")
        cluster_id = self.name(m["cluster_id"], f"{path}.cluster_id") if "cluster_id" in m else ""
        bandwidth = (
            float(parse_quantity(self.quantity(m["image_pull_bandwidth"], f"{path}.image_pull_bandwidth")))
            if "image_pull_bandwidth" in m
            else 0.0
        )
        preloaded = None
        if "preloaded_images" in m:
            raw = m["preloaded_images"] or []
            if not isinstance(raw, list) or not all(isinstance(i, str) and i for i in raw):
                raise self.fail(f"{path}.preloaded_images", "must be a list of image names")
            preloaded = tuple(raw)
        images = ImageSettings(bandwidth=bandwidth, preloaded=preloaded)
        return ClusterConfig(name=name, nodes=parsed, cluster_id=cluster_id, images=images)

    def image_sizes(self, value: Any) -> tuple[dict[str, int], int]:
        m = self.mapping(value or {}, "images", {"sizes", "default_size"})
        sizes = m.get("sizes") or {}
        if not isinstance(sizes, dict):
            raise self.fail("images.sizes", "must be a mapping of image name to size")
        out = {}
        for image, size in sizes.items():
            if not isinstance(image, str) or not image:
                raise self.fail("images.sizes", f"image names must be strings, got {image!r}")
            out[image] = int(parse_quantity(self.quantity(size, f"images.sizes.{image}")))
        default = (
            int(parse_quantity(self.quantity(m["default_size"], "images.default_size"))) if "default_size" in m else DEFAULT_IMAGE_SIZE
        )
        return out, default


def parse_config(data: Any, source: str = "<config>") -> FederationConfig:
    """A FederationConfig from already-loaded YAML data."""
    r = _Reader(source)
    top = r.mapping(data, "", {"origin", "donors", "images"}, {"origin"})
    sizes, default_size = r.image_sizes(top.get("images"))

    def sized(cluster: ClusterConfig) -> ClusterConfig:
        return replace(cluster, images=replace(cluster.images, sizes=sizes, default_size=default_size))

    origin = sized(r.cluster(top["origin"], "origin", default_name="origin"))
    donors_raw = top.get("donors") or []
    if not isinstance(donors_raw, list):
        raise r.fail("donors", "must be a list")
    donors = []
    names = {origin.name}
    ids = {origin.id}
    for i, d in enumerate(donors_raw):
        cluster = sized(r.cluster(d, f"donors[{i}]"))
        if cluster.name in names:
            raise r.fail(f"donors[{i}].name", f"cluster name {cluster.name!r} is used twice")
        if cluster.id in ids:
            raise r.fail(f"donors[{i}].cluster_id", f"cluster id {cluster.id!r} is used twice")
        names.add(cluster.name)
        ids.add(cluster.id)
        if "grant" not in d:
            raise r.fail(f"donors[{i}].grant", "required field is missing")
        grant = r.resources(d["grant"], f"donors[{i}].grant", integer=False)
        if not grant:
            raise r.fail(f"donors[{i}].grant", "must grant at least one resource")
        donors.append(DonorConfig(cluster=cluster, grant=grant))
    return FederationConfig(origin=origin, donors=tuple(donors), source=source)


def load_config(path: str | Path | None = None) -> FederationConfig:
    """Read and check a YAML file (the shipped default when ``path`` is None)."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    source = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(source, "", f"invalid YAML: {where}{getattr(exc, 'problem', None) or exc}") from None
    return parse_config(data, source)
