"""The local federation as a spawn test sees it: a user's pod, its env, GPUs someone else holds,
the messages a spawn showed."""

from __future__ import annotations

import time

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError

DONOR = "donor-1"
SLEEPER = ["sleep", "600"]


def pod_of(federation, user: str):
    try:
        return federation.origin.store.get("pods", "default", f"jupyter-{user}")
    except ApiError:
        return None


def env_of(pod) -> dict:
    return {e["name"]: e for e in pod["spec"]["containers"][0].get("env") or []}


def occupy(federation, node: str, count: int, name: str) -> None:
    """Hold ``count`` GPUs of ``node`` with a pod someone else started (bound directly)."""
    store = federation.origin.store
    try:
        store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    except ApiError:
        pass  # already there
    if federation.control_plane == "kube":
        _wait_for_default_service_account(store, "others")
    spec = {
        "nodeName": node,
        "containers": [{"name": "c", "image": "busybox", "command": SLEEPER, "resources": {"limits": {"nvidia.com/gpu": str(count)}}}],
    }
    if node == DONOR:
        spec["tolerations"] = [liqo.virtual_node_toleration()]
    store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "others"}, "spec": spec})


def _wait_for_default_service_account(store, namespace: str, timeout_s: float = 30.0) -> None:
    """kube-apiserver refuses a pod in a namespace whose ``default`` ServiceAccount
    kube-controller-manager has not made yet (a moment after the namespace), as a client meets it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store.get("serviceaccounts", namespace, "default")
            return
        except ApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def release(federation, name: str) -> None:
    federation.origin.store.delete("pods", "others", name, grace_period_seconds=0)


def messages(events) -> list[str]:
    return [e.get("message", "") for e in events]
