"""Container images as placement compares them: a pod's images against the nodes that have them.

kube-scheduler's ImageLocality plugin (pkg/scheduler/framework/plugins/imagelocality,
``normalizedImageName``) only adds ``:latest`` to a name without a tag, and its own comment lists
what that misses: a pod that says ``jupyter/base-notebook`` on a node whose runtime (containerd,
CRI-O) reports ``docker.io/jupyter/base-notebook:latest``. Both sides are therefore brought to the
fully qualified form the runtimes report, as the image reference library every runtime uses
(``distribution/reference`` ``ParseNormalizedNamed``) writes it: Docker Hub's domain and its
``library/`` prefix added where a name has none, ``:latest`` where there is neither a tag nor a
digest. A name is never lowercased or otherwise repaired: one that is not a valid reference
matches only itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPOSITORY_PREFIX = "library/"
DEFAULT_TAG = "latest"
NO_IMAGES: frozenset[str] = frozenset()


def normalize(name: str) -> str:
    """``name`` fully qualified: ``nginx`` -> ``docker.io/library/nginx:latest``."""
    if not name:
        return name
    path, at, digest = name.partition("@")
    # as normalizedImageName: a ':' after the last '/' is a tag (one before it is a registry's port)
    if not at and path.rfind(":") <= path.rfind("/"):
        path = f"{path}:{DEFAULT_TAG}"
    first, slash, rest = path.partition("/")
    # the first component is a registry only when it looks like a host: a dot, a port, localhost
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = DEFAULT_DOMAIN, path
    elif first == LEGACY_DEFAULT_DOMAIN:
        first = DEFAULT_DOMAIN
    if first == DEFAULT_DOMAIN and "/" not in rest:
        rest = OFFICIAL_REPOSITORY_PREFIX + rest
    return f"{first}/{rest}{at}{digest}"


def pod_images(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The images a pod's node must have before it runs, normalized, each once, containers
    first (the first is the main container's): init containers pull before the pod starts
    too, and kube-scheduler's ImageLocality counts them as well."""
    seen: dict[str, None] = {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            image = container.get("image") if isinstance(container, Mapping) else None
            if isinstance(image, str) and image:
                seen.setdefault(normalize(image), None)
    return tuple(seen)


def reported(images: Any) -> tuple[str, ...]:
    """Every name a node's ``status.images`` lists, as written (anything else is left out)."""
    if type(images) is not list:
        return ()
    names: list[Any] = []
    for image in images:  # every heartbeat of every node passes here: no generators
        listed = image.get("names") if isinstance(image, dict) else None
        if type(listed) is list:
            names += listed
    if not all(type(name) is str and name for name in names):
        names = [name for name in names if type(name) is str and name]
    return tuple(names)


def node_images(names: Iterable[str]) -> frozenset[str]:
    """The normalized set of the images a node reports (``reported``'s names)."""
    return frozenset(normalize(n) for n in names)


class NodeImages:
    """A node's ``status.images`` -> its normalized set, one set per distinct list.

    Nodes that pulled the same images share one set (a few per pool of nodes), a heartbeat
    that reports the same list costs one lookup, and an unchanged node keeps its set.
    """

    LIMIT = 65536  # distinct lists remembered; past it, sets are made per call (still correct)

    def __init__(self) -> None:
        self._sets: dict[tuple[str, ...], frozenset[str]] = {}

    def of(self, listed: Any) -> frozenset[str]:
        names = reported(listed)
        if not names:
            return NO_IMAGES
        known = self._sets.get(names)
        if known is None:
            known = node_images(names)
            if len(self._sets) < self.LIMIT:
                self._sets[names] = known
        return known


def file_slot(having: Any, slot: int, before: frozenset[str], after: frozenset[str]) -> None:
    """Move bit ``slot`` of ``having`` (image -> bit set, a map being mutated) from the images
    of ``before`` to those of ``after``: which nodes have an image, as ``fitindex`` files them."""
    bit = 1 << slot
    for image in before - after:
        bits = having.get(image, 0) & ~bit
        if bits:
            having[image] = bits
        elif image in having:
            del having[image]
    for image in after - before:
        having[image] = having.get(image, 0) | bit
