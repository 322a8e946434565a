"""Start and stop the local federation from tests (here and in the spawner's integration tests)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.config import ClusterConfig, FederationConfig, NodeConfig, load_config, parse_config
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.federation import Federation
from jupyter_gpuburst.sim.store import Store


@contextlib.asynccontextmanager
async def running_federation(
    config: FederationConfig | dict | str | Path | None = None,
    state_dir: str | Path | None = None,
    kubeconfig: str | Path | None = None,
    faults: dict[str, Faults] | None = None,
    control_plane: str = "emulator",
) -> AsyncIterator[Federation]:
    """A started Federation (default config unless given a config, a dict or a YAML path);
    with ``kubeconfig``, writes one there (contexts: origin and one per donor).
    ``control_plane="kube"``: each site on the real control plane (sim/kube)."""
    if isinstance(config, dict):
        config = parse_config(config, "<test config>")
    elif isinstance(config, (str, Path)):
        config = load_config(config)
    fed = Federation(config, state_dir, faults, control_plane=control_plane)
    await fed.start()
    try:
        if kubeconfig is not None:
            fed.write_kubeconfig(kubeconfig)
        yield fed
    finally:
        await fed.stop()


@contextlib.asynccontextmanager
async def one_node_cluster(
    state_dir: Path,
    index: int,
    resources: dict[str, int] | None = None,
    backoff_initial_s: float | None = None,
    sync_frequency_s: float | None = None,
) -> AsyncIterator[Cluster]:
    """A started cluster ``c`` with one node ``n`` (``resources``) and its kubelet, for kubelet
    tests. ``index`` picks its pod network: test files that may run at once each take their own.
    ``backoff_initial_s`` shortens the kubelet's restart back-off (10 s), ``sync_frequency_s``
    its periodic sync of every running pod (60 s)."""
    cluster = Cluster(ClusterConfig(name="c", nodes=(NodeConfig(name="n", resources=dict(resources or {})),)), index, state_dir)
    if backoff_initial_s is not None:
        cluster.kubelet.backoff_initial_s = backoff_initial_s
    if sync_frequency_s is not None:
        cluster.kubelet.sync_frequency_s = sync_frequency_s
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def wait_for_pod(
    store: Store, namespace: str, name: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
) -> dict[str, Any]:
    """Poll the store until the pod satisfies ``predicate``; AssertionError with its last state on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = store.get("pods", namespace, name)
        except Exception as exc:  # noqa: BLE001 - not there yet, or gone
            last = exc
        else:
            if predicate(last):
                return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"pod {namespace}/{name} did not reach the expected state in {timeout}s; last: {last!r}")


async def wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition", interval: float = 0.02) -> Any:
    """Poll ``condition`` (a function, or a coroutine function) until it returns something true,
    and return that; fail with ``what`` after ``timeout`` seconds. Tests wait with this, never
    with a fixed sleep: it is as fast as the event allows and as patient as ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)


def is_running_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def gone(store: Any, rtype: str, namespace: str | None, name: str) -> bool:
    """Whether the store answers 404 for the object (a Store, or a real control plane's RemoteStore)."""
    try:
        store.get(rtype, namespace, name)
    except ApiError as exc:
        return exc.code == 404
    return False
