"""A running container's lifecycle hooks and probes (the ``Kubelet``'s part that watches one):
postStart before it counts as running, startup, readiness and liveness probes, and its stop
(preStop within the grace period, then SIGTERM, then SIGKILL)."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kubelet import hooks, probes, processes
from jupyter_gpuburst.sim.kubelet.status import ContainerRun, PodRun

log = logging.getLogger("jupyter_gpuburst.sim.kubelet.pods")  # the kubelet's one log
Obj = dict[str, Any]
MIN_GRACE_AFTER_HOOK_S = 2.0  # kubelet's minimumGracePeriodInSeconds: SIGTERM always gets this long


class _ProbeDone(Exception):
    """Ends a probe worker whose job is done (startup succeeded, container being killed)."""


class ContainerLifecycle:
    """Hooks, probes and stops of the containers of a ``Kubelet`` (which it is a part of)."""

    async def _exec_probe(self, pr: PodRun, c: ContainerRun, command: list[str], timeout: float) -> tuple[int, bytes]:
        try:
            proc, _ = await self._spawn_in(pr, c, command, stdin=False, tty=False)
        except ApiError as err:
            return 126, err.message.encode()
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            processes.signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            return 1, f"command {command!r} timed out".encode()
        return proc.returncode or 0, out + err

    async def _post_start(self, pr: PodRun, c: ContainerRun, handler: Obj) -> bool:
        """Run the postStart hook; the container is not Running until it returns. On failure the
        container is killed (its preStop hook runs first), as the kubelet does; False then."""
        hook = asyncio.ensure_future(hooks.run_hook(handler, c.spec, pr.ip, self._podref(pr), lambda cmd: self._exec_hook(pr, c, cmd)))
        killed = asyncio.ensure_future(pr.killed.wait())
        await asyncio.wait([hook, killed], return_when=asyncio.FIRST_COMPLETED)
        killed.cancel()
        if not hook.done():  # the pod is being deleted: the kubelet gives up on the hook
            hook.cancel()
            await asyncio.gather(hook, return_exceptions=True)
            return False
        failure = hook.result()
        if failure is None:
            return True
        log.debug("%s", failure)  # may hold what the hook printed: not above debug
        self._event(pr, "FailedPostStartHook", "PostStartHook failed", container=c, warning=True)
        self._event(pr, "Killing", "FailedPostStartHook", container=c)
        await self._stop_container(pr, c, float(pr.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        return False

    async def _stop_container(self, pr: PodRun, c: ContainerRun, grace: float) -> None:
        """The kubelet's killContainer: the preStop hook within the grace period, then SIGTERM,
        then SIGKILL once the rest of the period (at least 2 s after a hook) has passed."""
        proc = c.process
        handler = None if c.init else hooks.handler_of(c.spec, "preStop")
        if proc is not None and proc.returncode is None and handler is not None and grace > 0:
            started = time.monotonic()
            try:
                failure = await asyncio.wait_for(
                    hooks.run_hook(handler, c.spec, pr.ip, self._podref(pr), lambda cmd: self._exec_hook(pr, c, cmd)), grace
                )
            except TimeoutError:
                failure = None
                log.info("PreStop hook for container %s in pod %s did not complete in %ss", c.name, self._podref(pr), grace)
            if failure is not None:
                log.debug("%s", failure)  # may hold what the hook printed: not above debug
                self._event(pr, "FailedPreStopHook", "PreStopHook failed", container=c, warning=True)
            grace = max(grace - (time.monotonic() - started), MIN_GRACE_AFTER_HOOK_S)
        await processes.stop_process(proc, grace)

    @staticmethod
    def _podref(pr: PodRun) -> str:
        return f"{pr.key[1]}_{pr.key[0]}({pr.uid})"

    async def _exec_hook(self, pr: PodRun, c: ContainerRun, command: list[str]) -> tuple[int, bytes]:
        try:
            proc, _ = await self._spawn_in(pr, c, command, stdin=False, tty=False)
        except ApiError as err:
            return 126, err.message.encode()
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            processes.signal_group(proc.pid, signal.SIGKILL)
            raise
        return proc.returncode or 0, out + err

    def _after_startup(self, pr: PodRun, c: ContainerRun, readiness: Obj | None, liveness: Obj | None) -> list[asyncio.Task]:
        tasks = []
        if readiness:
            tasks.append(asyncio.create_task(self._probe_loop(pr, c, "Readiness", probes.ProbeSpec.of(readiness), None, None, tasks)))
        if liveness:
            tasks.append(asyncio.create_task(self._probe_loop(pr, c, "Liveness", probes.ProbeSpec.of(liveness), None, None, tasks)))
        return tasks

    async def _probe_loop(
        self,
        pr: PodRun,
        c: ContainerRun,
        kind: str,
        spec: probes.ProbeSpec,
        readiness: Obj | None,
        liveness: Obj | None,
        siblings: list[asyncio.Task],
    ) -> None:
        proc = c.process

        def failed_attempt(why: str) -> None:
            if proc.returncode is None and not pr.killing:
                self._event(pr, "Unhealthy", f"{kind} probe failed: {why}", container=c, warning=True)

        def on_result(ok: bool, why: str) -> None:
            if proc.returncode is not None or pr.killing:
                return
            if kind == "Readiness":
                c.ready = ok
                self._publish(pr)
            elif kind == "Startup" and ok:
                c.started = True
                c.ready = readiness is None
                self._publish(pr)
                siblings.extend(self._after_startup(pr, c, readiness, liveness))
                raise _ProbeDone
            elif not ok:  # liveness, or startup past its failure threshold
                c.kill_reason = kind.lower()
                self._event(pr, "Killing", f"Container {c.name} failed {kind.lower()} probe, will be restarted", container=c)
                grace = (
                    spec.termination_grace_s
                    if spec.termination_grace_s is not None
                    else pr.pod["spec"].get("terminationGracePeriodSeconds", 30)
                )
                siblings.append(asyncio.create_task(self._stop_container(pr, c, float(grace))))
                raise _ProbeDone

        async def attempt() -> tuple[bool, str]:
            return await probes.run_probe(spec, c.spec, pr.ip, lambda cmd, timeout: self._exec_probe(pr, c, cmd, timeout))

        try:
            await probes.ProbeWorker(spec, attempt, on_result, failed_attempt).run()
        except _ProbeDone:
            pass
