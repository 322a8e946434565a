"""Container probes (exec, tcpSocket, httpGet) with the kubelet's timing and thresholds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

Obj = dict[str, Any]
ExecRunner = Callable[[list[str], float], Awaitable[tuple[int, bytes]]]
GRPC_UNSUPPORTED = "gRPC probes are not supported by the emulated kubelet (use exec, tcpSocket or httpGet)"


@dataclass(frozen=True)
class ProbeSpec:
    """A probe with the API's defaults filled in."""

    handler: Obj
    initial_delay_s: float
    period_s: float
    timeout_s: float
    success_threshold: int
    failure_threshold: int
    termination_grace_s: float | None

    @classmethod
    def of(cls, probe: Obj) -> ProbeSpec:
        return cls(
            handler=probe,
            initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
            period_s=float(probe.get("periodSeconds", 10)),
            timeout_s=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
            termination_grace_s=probe.get("terminationGracePeriodSeconds"),
        )


def _port(value: Any, container: Obj) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"port {value!r} not found in the container's ports")


async def run_probe(spec: ProbeSpec, container: Obj, pod_ip: str, exec_runner: ExecRunner) -> tuple[bool, str]:
    """One probe attempt: (success, failure message as the kubelet words it)."""
    h = spec.handler
    try:
        if "exec" in h:
            code, out = await exec_runner(list(h["exec"].get("command") or []), spec.timeout_s)
            if code == 0:
                return True, ""
            text = out.decode(errors="replace").strip()
            return False, text or f"command {h['exec'].get('command')!r} exited with {code}"
        if "tcpSocket" in h:
            host = h["tcpSocket"].get("host") or pod_ip
            port = _port(h["tcpSocket"]["port"], container)
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), spec.timeout_s)
            except (OSError, TimeoutError) as exc:
                reason = "i/o timeout" if isinstance(exc, TimeoutError) else "connect: connection refused"
                return False, f"dial tcp {host}:{port}: {reason}"
            writer.close()
            return True, ""
        if "httpGet" in h:
            get = h["httpGet"]
            host = get.get("host") or pod_ip
            port = _port(get["port"], container)
            scheme = (get.get("scheme") or "HTTP").lower()
            path = get.get("path") or "/"
            url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
            headers = {hh["name"]: hh["value"] for hh in get.get("httpHeaders") or []}
            headers.setdefault("User-Agent", "kube-probe/1.31")
            try:
                timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
                async with (
                    aiohttp.ClientSession(timeout=timeout) as http,
                    http.get(url, headers=headers, ssl=False, allow_redirects=False) as r,
                ):
                    if 200 <= r.status < 400:
                        return True, ""
                    return False, f"HTTP probe failed with statuscode: {r.status}"
            except TimeoutError:
                return False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
            except aiohttp.ClientError as exc:
                return False, f'Get "{url}": dial tcp {host}:{port}: connect: connection refused' if isinstance(
                    exc, aiohttp.ClientConnectorError
                ) else f'Get "{url}": {exc}'
        if "grpc" in h:
            # Not emulated: such a probe fails every time, saying why, so a container relying
            # on it never turns Ready (or is restarted) instead of passing unchecked.
            return False, GRPC_UNSUPPORTED
    except ValueError as exc:
        return False, str(exc)
    return False, "probe has no handler"


class ProbeWorker:
    """Runs one probe every period and reports state changes through ``on_result``.

    ``on_result(success)`` is called when the probe's result flips past its threshold (and once
    at the first decision), as the kubelet's prober manager updates its result cache;
    ``on_failed_attempt(why)`` for every failed attempt, before that.
    """

    def __init__(
        self,
        spec: ProbeSpec,
        attempt: Callable[[], Awaitable[tuple[bool, str]]],
        on_result: Callable[[bool, str], None],
        on_failed_attempt: Callable[[str], None],
    ):
        self.spec = spec
        self._attempt = attempt
        self._on_result = on_result
        self._on_failed_attempt = on_failed_attempt
        self.result: bool | None = None

    async def run(self) -> None:
        await asyncio.sleep(self.spec.initial_delay_s)
        successes = failures = 0
        while True:
            ok, why = await self._attempt()
            if ok:
                successes, failures = successes + 1, 0
                if successes >= self.spec.success_threshold and self.result is not True:
                    self.result = True
                    self._on_result(True, "")
            else:
                successes, failures = 0, failures + 1
                # the kubelet records each failed attempt before it acts on the result: the
                # failure that trips the threshold (a liveness kill ends this worker) is told too
                self._on_failed_attempt(why)
                if failures >= self.spec.failure_threshold and self.result is not False:
                    self.result = False
                    self._on_result(False, why)
            await asyncio.sleep(self.spec.period_s)
