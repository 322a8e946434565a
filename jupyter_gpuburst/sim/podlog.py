"""pods/log as kube-apiserver answers it, read from the log files the kubelet writes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim.apiwire import int_param, truthy
from jupyter_gpuburst.sim.errors import ApiError, bad_request
from jupyter_gpuburst.sim.store import Store

Obj = dict[str, Any]
# (namespace, pod, container or None for the first, previous instance) -> log file
LogReader = Callable[[str, str, "str | None", bool], "Path | None"]


async def serve_log(
    request: web.Request, store: Store, log_reader: LogReader | None, ns: str, name: str, container: str | None = None
) -> web.StreamResponse:
    """pods/log: a container's log, its tail or a prefix of it, or followed while it runs.
    ``container`` is the query's unless given (a kubelet's path names it)."""
    pod = store.get("pods", ns, name)
    containers = [c["name"] for c in pod["spec"].get("containers", [])]
    init = [c["name"] for c in pod["spec"].get("initContainers") or []]
    container = container or request.query.get("container")
    if not container:
        if len(containers) > 1:
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}] or one of the init containers: [{' '.join(init)}]"
                if init
                else f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
            )
        container = containers[0]
    if container not in containers + init:
        raise bad_request(f"container {container} is not valid for pod {name}")
    previous = truthy(request.query.get("previous"))
    path = log_reader(ns, name, container, previous) if log_reader else None
    if path is None or not Path(path).exists():
        if previous:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    tail = int_param(request.query, "tailLines")
    limit = int_param(request.query, "limitBytes")
    data = Path(path).read_bytes()
    offset = len(data)
    if tail is not None:
        data = b"".join(data.splitlines(keepends=True)[-tail:]) if tail > 0 else b""
    if limit is not None:
        data = data[:limit]
    if not truthy(request.query.get("follow")):
        return web.Response(body=data, content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    await response.write(data)
    while request.transport is not None and not request.transport.is_closing():
        try:
            current = store.get("pods", ns, name)
        except ApiError:
            break
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
        if chunk:
            offset += len(chunk)
            await response.write(chunk)
        elif current["metadata"]["uid"] != pod["metadata"]["uid"] or instance_ended(current, container):
            break
        await asyncio.sleep(0.2)
    # a follower that went away (kube-apiserver relays a client's hang-up) needs no end
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


def instance_ended(pod: Obj, container: str) -> bool:
    """Whether the followed container instance is no longer running (a follow then ends)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if cs.get("name") == container:
            state = cs.get("state") or {}
            return "terminated" in state or ("waiting" in state and bool(cs.get("lastState")))
    return False
