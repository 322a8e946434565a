"""What a GPU kernel's start may leave behind, and its removal: a failed start's pod and Secret,
and an earlier start of the same kernel that its server gave up without the hub hearing."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.hub.kernels.records import KernelRecord


async def stop_earlier_start(registry: Any, user: str, server_name: str, kernel_id: str) -> None:
    """Stop what is left of an earlier start of kernel ``kernel_id`` of the same server.

    A server starts a kernel id again only once its earlier start failed or was shut down, and a
    shutdown deletes it here first. What is left is a start whose answer or wait the hub never
    finished (the hub restarted mid-start, the server's delete lost with it): its pod would hold
    a GPU that nobody reaches until the server stops. Never raises: the new start matters more,
    and the server's stop still takes what this could not."""
    for record in registry.list(user, server_name):
        if record.kernel_id != kernel_id or registry.state(record) not in ("pending", "running"):
            continue
        registry.log.info("GPU kernel %s of %s: its server starts kernel %r again; stopping this earlier start", record.id, user, kernel_id)
        try:
            await registry.stop(record, wait=0)
        except Exception:  # noqa: BLE001 - logged; the new start goes on
            registry.log.warning(
                "Could not stop GPU kernel %s of %s, an earlier start of kernel %r", record.id, user, kernel_id, exc_info=True
            )


async def discard(registry: Any, record: KernelRecord) -> None:
    """Delete the pod and Secret of a start that failed, whichever of them exists; never raises
    (the start's own error is the one to report)."""
    try:
        await registry.api.delete_namespaced_pod(record.pod_name, record.namespace, grace_period_seconds=0)
    except Exception as exc:  # noqa: BLE001 - logged; the Secret is still deleted
        if not (isinstance(exc, ApiException) and exc.status == 404):
            registry.log.warning(
                "Could not delete the pod %s/%s of a failed start: %s", record.namespace, record.pod_name, exc.__class__.__name__
            )
    await delete_secret(registry, record.namespace, record.pod_name)


async def delete_secret(registry: Any, namespace: str, name: str) -> None:
    """Delete a kernel's connection Secret; a failure is logged, never raised."""
    try:
        await registry.api.delete_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            registry.log.warning("Could not delete the connection secret %s/%s: %s", namespace, name, exc.status)
    except Exception as exc:  # noqa: BLE001 - the API server gone past the retries: said, not raised
        registry.log.warning("Could not delete the connection secret %s/%s: %s", namespace, name, exc.__class__.__name__)
