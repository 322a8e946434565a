"""A container's runs in a pod (the ``Kubelet``'s part that starts one): its image, filesystem
view, argv and environment, its process and what a start that fails or an exit leaves, and the
restart back-off between runs."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import bad_request
from jupyter_gpuburst.sim.kubelet import hooks, images, mounts, probes, processes, runtime, volumes
from jupyter_gpuburst.sim.kubelet.devices import DevicePlugin
from jupyter_gpuburst.sim.kubelet.status import ContainerRun, PodRun
from jupyter_gpuburst.sim.store import Store

Obj = dict[str, Any]
# kubelet's container restart back-off: 10 s doubling to 5 min; reset after 10 min of running.
BACKOFF_INITIAL_S = 10.0
BACKOFF_MAX_S = 300.0
IMAGE_RETRY_S = 10.0  # a container that may not pull is tried again on the kubelet's next sync
_HOSTNAME_HOOK = '''"""Written by the emulated kubelet: the pod's hostname for Python programs (no UTS namespace)."""
import os as _os
import socket as _socket

_name = _os.environ.get("HOSTNAME")
if _name:
    _socket.gethostname = lambda: _name
'''


def go_duration(seconds: float) -> str:
    """A duration as Go prints one: 500ms, 10s, 2m40s, 5m0s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _home_path(container: Obj, env: dict[str, str]) -> str:
    """HOME in the container: its env's, else the image's user's (jovyan in Jupyter images)."""
    if env.get("HOME", "").startswith("/"):
        return env["HOME"].rstrip("/") or "/"
    return "/home/jovyan" if runtime.JUPYTER_IMAGE.search(container.get("image", "")) else "/root"


class ContainerRunner:
    """Runs the containers of the pods of a ``Kubelet`` (which it is a part of)."""

    # the kubelet's own (pods.Kubelet)
    store: Store
    devices: DevicePlugin
    images: images.ImageCache
    state_dir: Path
    backoff_initial_s: float

    async def _container_loop(self, pr: PodRun, c: ContainerRun, policy: str) -> None:
        while not pr.killing:
            ran_from = time.monotonic()
            code = await self._run_once(pr, c)
            if pr.killing:
                return
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                return
            if time.monotonic() - ran_from > 2 * BACKOFF_MAX_S:
                c.backoff = 0.0  # ran long enough: the kubelet forgets the back-off
            await self._back_off(pr, c)

    async def _back_off(self, pr: PodRun, c: ContainerRun) -> None:
        """Wait before restarting ``c``: not at all the first time, then 10 s doubling to 5 min."""
        delay = c.backoff
        c.backoff = min(BACKOFF_MAX_S, delay * 2 if delay else self.backoff_initial_s)
        c.last_state = {"terminated": c.state.get("terminated", {})}
        if delay:
            podref = f"{pr.key[1]}_{pr.key[0]}({pr.uid})"
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {go_duration(delay)} restarting failed container={c.name} pod={podref}",
                }
            }
            c.ready = False
            self._event(pr, "BackOff", f"Back-off restarting failed container {c.name} in pod {podref}", container=c, warning=True)
            self._publish(pr)
            try:
                await asyncio.wait_for(pr.killed.wait(), delay)
            except TimeoutError:
                pass
        c.restart_count += 1

    def _container_env(self, pr: PodRun, c: ContainerRun, view: volumes.PathMap) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of the container's process (paths mapped
        where the view does not mount them)."""
        spec = c.spec
        # 0.0.0.0 is the pod's own only in a network namespace of its own
        replace_ip = pr.ip if pr.network is None else None
        argv = [view.rewrite(a.replace("0.0.0.0", replace_ip) if replace_ip else a) for a in runtime.container_argv(spec)]
        if not argv:
            raise FileNotFoundError(f'no command given and image "{spec.get("image", "")}" has no emulated entrypoint')
        given = runtime.pod_env(pr.pod, spec, self.store, replace_ip)
        env = {k: view.rewrite(v) for k, v in given.items()}
        env.update(self.devices.env(pr.uid, c.name, env))  # the device plugin's say over the image's
        home = str(view.directory(_home_path(spec, given), private=True))
        env.setdefault("HOME", home)
        working_dir = (spec.get("workingDir") or "").rstrip("/") or ("/" if spec.get("workingDir") else "")
        workdir = str(view.directory(working_dir)) if working_dir else home
        env.setdefault("PATH", os.pathsep.join([*runtime.image_path(), os.environ.get("PATH", "")]))
        env.setdefault("HOSTNAME", pr.hostname)
        if not processes.uts_namespaces():
            hook = pr.dir / "hostname-hook"
            hook.mkdir(exist_ok=True)
            (hook / "sitecustomize.py").write_text(_HOSTNAME_HOOK)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
        if os.geteuid() == 0 and runtime.run_as_user(pr.pod, spec) != 0:
            runtime._pretend_unprivileged(pr.dir, env)
        # a container's temporary files are its own, in its pod's directory, not in the host's /tmp
        env.setdefault("TMPDIR", str(view.directory("/tmp", private=True)))
        exe = runtime.resolve_command(argv[0], env.get("PATH"))
        if exe is None:
            raise FileNotFoundError(f'exec: "{argv[0]}": executable file not found in $PATH')
        return [exe, *argv[1:]], env, workdir

    def _view(self, pr: PodRun, c: ContainerRun) -> volumes.PathMap:
        """The container's filesystem view: volumes bound in a mount namespace of its own where
        this kubelet may, else mapped by path rewriting (with only the hosts file bound, as root)."""
        spec = c.spec
        if pr.real_mounts:
            home = _home_path(spec, runtime.pod_env(pr.pod, spec, self.store, pr.ip))
            return volumes.namespace_view(
                pr.dir,
                spec,
                pr.volumes,
                home=home,
                hosts_file=pr.hosts_file,
                instance=c.restart_count,
                keep_visible=[self.state_dir],
                keep_home_off=[self.state_dir, Path(sys.prefix), Path(sys.base_prefix)],
            )
        view = volumes.container_view(pr.dir, spec, pr.volumes)
        if processes.uts_namespaces() and pr.hosts_file is not None:
            view.fstab = pr.dir / "fstab-hosts"
            if not view.fstab.exists():
                view.fstab.write_text(mounts.plan([mounts.Mount("/etc/hosts", pr.hosts_file)], [], pr.dir, []).fstab[0] + "\n")
        return view

    async def _spawn(
        self,
        pr: PodRun,
        view: volumes.PathMap,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        *,
        stdout: Any,
        stderr: Any,
        stdin: Any = asyncio.subprocess.DEVNULL,
    ) -> asyncio.subprocess.Process:
        cwd: str | Path = workdir
        if processes.uts_namespaces():
            argv = processes.enter_pod_argv(argv, pr.hostname, view.fstab, workdir)
            cwd = pr.dir  # the working directory may exist only in the new mount namespace
        if pr.network is not None:
            argv = pr.network.enter_argv(argv)
        return await processes.start(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, stdin=stdin)

    async def _spawn_in(
        self, pr: PodRun, c: ContainerRun, command: list[str], *, stdin: bool, tty: bool
    ) -> tuple[asyncio.subprocess.Process, int | None]:
        """A process beside the container's (exec, exec probes, hooks): same env, cwd, hostname
        and, where volumes are mounted for real, the container's own mount namespace."""
        view = c.view
        _, env, cwd = self._container_env(pr, c, view)
        argv = [view.rewrite(a) for a in command]
        exe = runtime.resolve_command(argv[0], env.get("PATH"))
        if exe is None:
            raise bad_request(f'exec: "{argv[0]}": executable file not found in $PATH')

        async def spawn(**streams: Any) -> asyncio.subprocess.Process:
            if not pr.real_mounts:
                return await self._spawn(pr, view, [exe, *argv[1:]], env, cwd, **streams)
            if c.process is None or c.process.returncode is not None:
                raise bad_request(f'container "{c.name}" is not running')
            await processes.entered(c.process.pid)
            wrapped = processes.enter_container_argv(c.process.pid, [exe, *argv[1:]], cwd, network=pr.network is not None)
            return await processes.start(wrapped, env=env, cwd=pr.dir, **streams)

        if tty:
            import pty

            master, slave = pty.openpty()
            try:
                proc = await spawn(stdout=slave, stderr=slave, stdin=slave)
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            return proc, master
        pipe = asyncio.subprocess.PIPE
        proc = await spawn(stdout=pipe, stderr=pipe, stdin=pipe if stdin else asyncio.subprocess.DEVNULL)
        return proc, None

    async def _run_once(self, pr: PodRun, c: ContainerRun) -> int:
        """Start the container's process, probe it while it runs; its exit code."""
        spec = c.spec
        if not await self._ensure_image(pr, c):
            return 137
        c.log_path().touch()
        try:
            c.view = self._view(pr, c)
            argv, env, workdir = self._container_env(pr, c, c.view)
            self._event(pr, "Created", f"Created container {c.name}", container=c)
            with open(c.log_path(), "ab") as logfile:
                c.process = await self._spawn(pr, c.view, argv, env, workdir, stdout=logfile, stderr=asyncio.subprocess.STDOUT)
        except (OSError, ValueError, volumes.VolumeError) as exc:
            return self._start_error(pr, c, str(exc))
        c.ran = True
        if pr.killing:  # deleted while starting
            processes.signal_group(c.process.pid, signal.SIGKILL)
            await c.process.wait()
            return 137
        self._event(pr, "Started", f"Started container {c.name}", container=c)
        post_start = None if c.init else hooks.handler_of(spec, "postStart")
        if post_start is not None and not await self._post_start(pr, c, post_start):
            return await self._ended(pr, c, defaults.timestamp(self.store.now()))
        since = defaults.timestamp(self.store.now())
        c.state = {"running": {"startedAt": since}}
        startup = None if c.init else spec.get("startupProbe")
        readiness = None if c.init else spec.get("readinessProbe")
        liveness = None if c.init else spec.get("livenessProbe")
        c.started = startup is None and not c.init
        c.ready = c.started and readiness is None
        self._publish(pr)
        probe_tasks = []
        if startup:
            probe_tasks.append(
                asyncio.create_task(self._probe_loop(pr, c, "Startup", probes.ProbeSpec.of(startup), readiness, liveness, probe_tasks))
            )
        else:
            probe_tasks.extend(self._after_startup(pr, c, readiness, liveness))
        try:
            await c.process.wait()
        finally:
            for t in probe_tasks:
                t.cancel()
        return await self._ended(pr, c, since)

    async def _ensure_image(self, pr: PodRun, c: ContainerRun) -> bool:
        """The container's image on this node (``images``); False once the pod is being deleted."""
        waiting = dict(c.state.get("waiting") or {})

        def event(reason: str, message: str, warning: bool = False) -> None:
            self._event(pr, reason, message, container=c, warning=warning)
            if reason == "Pulling":
                self._publish(pr)  # the container waits (ContainerCreating) while the image comes

        while not pr.killing:
            try:
                return await self.images.ensure(pr.pod["spec"]["nodeName"], c.spec, event, pr.killed)
            except images.PullFailed as exc:
                c.state = {"waiting": {"reason": exc.reason, "message": exc.message}}
                self._publish(pr)
            try:
                await asyncio.wait_for(pr.killed.wait(), IMAGE_RETRY_S)
            except TimeoutError:
                c.state = {"waiting": waiting} if waiting else c.state
        return False

    async def _ended(self, pr: PodRun, c: ContainerRun, since: str) -> int:
        """The container's main process has exited (or is being killed): its state, its exit code."""
        code = await c.process.wait()
        exit_code = 128 - code if code < 0 else code
        processes.signal_group(c.process.pid, signal.SIGKILL)  # the container ends with its main process
        if not pr.killing:
            reason = "Completed" if exit_code == 0 else "Error"
            c.state = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": since,
                    "finishedAt": defaults.timestamp(self.store.now()),
                    "containerID": f"sim://{pr.uid}-{c.name}-{c.restart_count}",
                }
            }
            c.ready = False
            c.started = False
            c.kill_reason = None
            self._publish(pr)
        return exit_code

    def _start_error(self, pr: PodRun, c: ContainerRun, why: str) -> int:
        message = f"failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: {why}: unknown"
        self._event(pr, "Failed", f"Error: {message}", container=c, warning=True)
        with open(c.log_path(), "a") as fh:
            fh.write(message + "\n")
        now = defaults.timestamp(self.store.now())
        c.state = {
            "terminated": {
                "exitCode": 128,
                "reason": "StartError",
                "message": message,
                "startedAt": "1970-01-01T00:00:00Z",
                "finishedAt": now,
            }
        }
        c.ready = c.started = False
        self._publish(pr)
        return 128
