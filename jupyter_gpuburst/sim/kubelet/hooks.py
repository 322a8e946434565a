"""Container lifecycle hooks (postStart, preStop) run as the kubelet's handler runner runs them.

exec runs the command in the container and fails on a non-zero exit; httpGet fails only when the
request cannot be made (the kubelet does not look at a hook's status code); sleep waits. The
messages are the kubelet's; they go to the debug log, the events carry the short form only (a hook's
output may hold secrets, so the kubelet keeps it out of events).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from jupyter_gpuburst.sim.kubelet.probes import _port

Obj = dict[str, Any]
# command -> (exit code, output); no timeout: the kubelet gives exec hooks none of their own
HookExec = Callable[[list[str]], Awaitable[tuple[int, bytes]]]


def handler_of(container: Obj, hook: str) -> Obj | None:
    """The container's ``postStart`` or ``preStop`` handler, if it has one."""
    return ((container.get("lifecycle") or {}).get(hook)) or None


async def run_hook(handler: Obj, container: Obj, pod_ip: str, podref: str, exec_in_container: HookExec) -> str | None:
    """Run one handler; None on success, else the kubelet's failure message."""
    name = container["name"]
    if "exec" in handler:
        command = list(handler["exec"].get("command") or [])
        code, out = await exec_in_container(command)
        if code == 0:
            return None
        output = out.decode(errors="replace")
        return f"Exec lifecycle hook ({command}) for Container {name!r} in Pod {podref!r} failed - error: command {' '.join(command)!r} exited with {code}: {output}, message: {output!r}"
    if "httpGet" in handler:
        get = handler["httpGet"]
        path = get.get("path") or "/"
        try:
            port = _port(get["port"], container)
        except ValueError as exc:
            return f"HTTP lifecycle hook ({path}) for Container {name!r} in Pod {podref!r} failed - error: {exc}"
        host = get.get("host") or pod_ip
        scheme = (get.get("scheme") or "HTTP").lower()
        url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
        headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
        try:
            async with aiohttp.ClientSession() as http, http.get(url, headers=headers, ssl=False, allow_redirects=False) as response:
                await response.read()
        except (aiohttp.ClientError, OSError) as exc:
            return f'HTTP lifecycle hook ({path}) for Container {name!r} in Pod {podref!r} failed - error: Get "{url}": {exc}'
        return None
    if "sleep" in handler:
        await asyncio.sleep(float(handler["sleep"].get("seconds", 0)))
        return None
    return f"Cannot run handler: unknown handler type for Container {name!r} in Pod {podref!r}"
