"""Image pulls: a cache per node, pull time from the image's size and the site's bandwidth.

What the kubelet's image manager does (pkg/kubelet/images/image_manager.go, EnsureImageExists,
kubelet v1.31), with its event wording:

* ``imagePullPolicy`` Never or IfNotPresent with the image on the node: ``Pulled`` "Container
  image \"x\" already present on machine"; Never without it: Warning ``ErrImageNeverPull``
  "Container image \"x\" is not present with pull policy of Never" (the container waits with
  that reason and the kubelet tries again on its next sync).
* Otherwise (Always, or IfNotPresent without the image): ``Pulling`` "Pulling image \"x\"",
  then ``Pulled`` "Successfully pulled image \"x\" in 1.2s (3.4s including waiting). Image
  size: N bytes." The first duration is the pull itself, the second counts the wait behind
  other pulls: pulls on one node run one at a time (``serializeImagePulls``, the kubelet's
  default), and pods asking for an image the node is already pulling share that pull.
* A pulled image stays on the node (no image garbage collection) and is listed in the node's
  ``status.images`` (largest first, at most 50, as the kubelet reports them).

A pull takes size / bandwidth seconds: sizes from the federation config's ``images`` table,
bandwidth per site (``image_pull_bandwidth``; none: pulls take no time). A site's
``preloaded_images`` are on its nodes from the start; when it lists none, every image is (so
that a pod starts at once, as before pulls were modelled), and only ``Always`` pulls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]
NODE_STATUS_MAX_IMAGES = 50  # kubelet's --node-status-max-images default
DEFAULT_IMAGE_SIZE = 100 * 1024**2


@dataclass(frozen=True)
class ImageSettings:
    """One site's image settings (sim/config.py reads them)."""

    sizes: dict[str, int] = field(default_factory=dict)
    default_size: int = DEFAULT_IMAGE_SIZE
    bandwidth: float = 0.0  # bytes per second per node; 0: pulls take no time
    preloaded: tuple[str, ...] | None = None  # None: every image is on every node

    def size_of(self, image: str) -> int:
        return self.sizes.get(image, self.default_size)

    def pull_seconds(self, image: str) -> float:
        return self.size_of(image) / self.bandwidth if self.bandwidth > 0 else 0.0


def go_duration(seconds: float) -> str:
    """A time.Duration truncated to milliseconds as Go prints it: 0s, 250ms, 1.5s, 2m3.25s, 1h0m0s."""
    ms = int(seconds * 1000)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs


class PullFailed(Exception):
    """The image cannot be had (``reason`` is the container's waiting reason)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass
class _Pull:
    task: asyncio.Task
    started: float = 0.0  # when it got the node's pull slot
    finished: float = 0.0


class ImageCache:
    """The images on each node of one cluster, and the pulls in flight."""

    def __init__(self, store: Store, settings: ImageSettings | None = None):
        self.store = store
        self.settings = settings or ImageSettings()
        self._present: dict[str, dict[str, int]] = {}  # node -> image -> size
        self._locks: dict[str, asyncio.Lock] = {}
        self._pulls: dict[tuple[str, str], _Pull] = {}

    def present(self, node: str, image: str) -> bool:
        return self.settings.preloaded is None or image in self._present.get(node, {})

    def preload(self, node: str) -> None:
        """Put the site's preloaded images on ``node`` and report them in its status."""
        for image in self.settings.preloaded or ():
            self._present.setdefault(node, {})[image] = self.settings.size_of(image)
        if self.settings.preloaded:
            self._publish(node)

    async def ensure(self, node: str, container: Obj, event: Callable[..., None], killed: asyncio.Event) -> bool:
        """Make the container's image present on ``node``, recording the kubelet's events.

        False when the pod was deleted meanwhile; ``PullFailed`` when the policy forbids a pull."""
        image = container.get("image", "")
        policy = container.get("imagePullPolicy") or "IfNotPresent"
        present = self.present(node, image)
        if policy == "Never" or (policy == "IfNotPresent" and present):
            if present:
                event("Pulled", f'Container image "{image}" already present on machine')
                return True
            message = f'Container image "{image}" is not present with pull policy of Never'
            event("ErrImageNeverPull", message, warning=True)
            raise PullFailed("ErrImageNeverPull", message)
        event("Pulling", f'Pulling image "{image}"')
        asked = time.monotonic()
        pull = self._pulls.get((node, image))
        if pull is None or (pull.task.done() and policy == "Always"):
            pull = _Pull(asyncio.create_task(self._pull(node, image), name=f"pull-{node}-{image}"))
            pull.task.add_done_callback(lambda _t, p=pull: p.__setattr__("finished", time.monotonic()))
            self._pulls[(node, image)] = pull
        waiter = asyncio.ensure_future(killed.wait())
        try:
            await asyncio.wait([pull.task, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not pull.task.done():
            return False  # deleted while pulling; the pull itself goes on and fills the cache
        done = pull.finished or time.monotonic()
        took = max(0.0, done - max(pull.started, asked))
        event(
            "Pulled",
            f'Successfully pulled image "{image}" in {go_duration(took)} ({go_duration(done - asked)} including waiting). '
            f"Image size: {self.settings.size_of(image)} bytes.",
        )
        return True

    async def _pull(self, node: str, image: str) -> None:
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:  # serializeImagePulls: one pull at a time per node
            pull = self._pulls.get((node, image))
            if pull is not None:
                pull.started = time.monotonic()
            # layers already on the node are not fetched again (an Always pull of a cached image)
            seconds = 0.0 if self.present(node, image) else self.settings.pull_seconds(image)
            if seconds > 0:
                await asyncio.sleep(seconds)
            self._present.setdefault(node, {})[image] = self.settings.size_of(image)
        self._publish(node)

    def _publish(self, node: str) -> None:
        images = sorted(self._present.get(node, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:NODE_STATUS_MAX_IMAGES]
        listed = [{"names": [name], "sizeBytes": size} for name, size in images]

        def update(n: Obj) -> None:
            n.setdefault("status", {})["images"] = listed

        try:
            self.store.mutate("nodes", None, node, update)
        except ApiError as exc:
            log.debug("node %s: images not reported: %s", node, exc.message)
