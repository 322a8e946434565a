"""Which warm pool pods are stale: made by another release of the hub, or for another image, than
their pool makes now.

After an upgrade (a new release, or a new image in the profiles or the kernel settings) the
placeholders and pre-started kernels of the old hub are still there, with the old image pulled
and, for a kernel, the old release's entry point waiting. The new hub's pools drain them and
make their own (``controller``), and no request adopts one meanwhile (``kernels.prestarted``):
an adopted kernel of the old release would run code the new hub does not speak to, and one of
the old image would not be what the student's profile says.

A pod says what it is in its metadata, which the hub's pod cache keeps: the release as
``VERSION_LABEL``, the image it was made for as ``POOL_IMAGE_ANNOTATION`` (fully qualified, as
``core.images`` compares images). A pod without either is of a release before both: stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyter_gpuburst import __version__
from jupyter_gpuburst.core import images, keys, release

RELEASE = release.label_value(__version__)


def stamp(pod: dict[str, Any], image: str) -> dict[str, Any]:
    """``pod`` marked as this release's, made for ``image`` (the image before any hook changes it)."""
    meta = pod["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), keys.VERSION_LABEL: RELEASE}
    meta["annotations"] = {**(meta.get("annotations") or {}), keys.POOL_IMAGE_ANNOTATION: images.normalize(image)}
    return pod


def stale(pod: Mapping[str, Any], image: str) -> str | None:
    """Why a pool's ``pod`` is not one its pool would make now for ``image``, or None when it is."""
    meta = pod.get("metadata") or {}
    made_by = (meta.get("labels") or {}).get(keys.VERSION_LABEL)
    if made_by != RELEASE:
        return f"release {made_by or 'unknown'}, the hub runs {RELEASE}"
    # a hook that drops our annotations drops it on the pods and on the pool's own pod alike:
    # both say '', and its pods are not drained over and over for it
    made_for = (meta.get("annotations") or {}).get(keys.POOL_IMAGE_ANNOTATION) or ""
    if made_for != images.normalize(image):
        return f"image {made_for or 'unknown'}, its pool's is {images.normalize(image) or 'unknown'}"
    return None


def image_of(pod: Mapping[str, Any]) -> str:
    """The image a pool's pod was made for ('' where it does not say)."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.POOL_IMAGE_ANNOTATION, "")
