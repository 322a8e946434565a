"""Which pool pods are stale: another release's, or made for another image, than the hub now."""

from __future__ import annotations

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.pools import stale


def pod(labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"labels": labels or {}, "annotations": annotations or {}}}


def test_a_pod_stamped_now_is_current_and_any_other_release_or_image_is_stale():
    made = stale.stamp(pod({keys.POOL_LABEL: "origin.gpu-1"}), "jupyter/gpu:2")
    assert made["metadata"]["labels"] == {keys.POOL_LABEL: "origin.gpu-1", keys.VERSION_LABEL: stale.RELEASE}
    # the same image however it is spelled: as the node's runtime reports it
    assert stale.stale(made, "docker.io/jupyter/gpu:2") is None
    assert stale.stale(made, "jupyter/gpu:3") == "image docker.io/jupyter/gpu:2, its pool's is docker.io/jupyter/gpu:3"
    older = pod({keys.VERSION_LABEL: "0.2.0"}, made["metadata"]["annotations"])
    assert stale.stale(older, "jupyter/gpu:2") == f"release 0.2.0, the hub runs {stale.RELEASE}"
    assert stale.stale(pod(), "jupyter/gpu:2") == f"release unknown, the hub runs {stale.RELEASE}"


def test_a_hook_that_drops_the_annotation_leaves_pods_current():
    # the pool's own pod says no image either: its pods must not be drained over and over
    hooked = pod({keys.VERSION_LABEL: stale.RELEASE})
    assert stale.image_of(hooked) == ""
    assert stale.stale(hooked, stale.image_of(hooked)) is None
