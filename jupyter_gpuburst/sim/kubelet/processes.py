"""A container's processes on the host, without any pod's state: the argv that starts one in
the pod's own UTS and mount namespaces (``unshare``) or enters a running one's (``nsenter``),
and stopping a container's whole process tree (SIGTERM, SIGKILL after the grace period).

Every container started here is remembered (``started``) until it is gone, and whatever of them
still runs when this Python process exits is SIGKILLed with its group (``atexit``): a kubelet in
a process whose event loop was interrupted (SIGTERM made KeyboardInterrupt in a test worker, a
benchmark run in-process) never ran the teardown that stops its pods, and they outlived it,
reparented to init (a stopped run's chaos test left three stand-in servers running). Where this
process cannot run its exit handlers (SIGKILL), or a container's start was cancelled before its
pid was known (a SIGTERM during a spawn left one server running), the container still goes: it
starts with the parent-death signal SIGKILL (``setpriv --pdeathsig``), as the last resort."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import psutil

from jupyter_gpuburst.sim.kubelet import mounts, netns

UNSHARE = mounts.UNSHARE
NSENTER = netns.NSENTER
SETPRIV = shutil.which("setpriv")  # util-linux, beside unshare and nsenter
# what a container's argv0 is until its own program has been exec'd (``entered``)
_WRAPPERS = tuple(tool.encode() for tool in (UNSHARE, NSENTER, SETPRIV) if tool)

# by pid; each psutil.Process knows its start time, so a pid the system reused is not taken for it
_started: dict[int, psutil.Process] = {}
_forget_at = 256  # the gone are forgotten when there are this many, then twice as many as remain


async def start(argv: list[str], **popen: object) -> asyncio.subprocess.Process:
    """Start a container's process (or one beside it) as the leader of a process group of its
    own, remembered by ``started``, and killed with this process (thread) however it ends.

    A cancelled start still finishes forking, then kills what it started: asyncio would kill
    only the direct child, and what that had started already would be left running."""
    if SETPRIV is not None:
        argv = [SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    spawning = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, start_new_session=True, **popen))
    try:
        return started(await asyncio.shield(spawning))
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await stop_process(await spawning, 0)
        raise


def started(proc: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
    """Remember the container ``proc`` (the leader of a process group of its own) until it is
    gone, to be killed with its group if this process exits first."""
    global _forget_at
    try:
        _started[proc.pid] = psutil.Process(proc.pid)
    except psutil.Error:
        return proc
    if len(_started) >= _forget_at:
        for pid in [pid for pid, process in _started.items() if not process.is_running()]:
            del _started[pid]
        _forget_at = max(256, 2 * len(_started))
    return proc


@atexit.register
def _kill_left_running() -> None:
    for pid, process in list(_started.items()):
        if process.is_running():
            family = descendants(pid)
            signal_group(pid, signal.SIGKILL)
            signal_all(family, signal.SIGKILL)
    _started.clear()


@cache
def uts_namespaces() -> bool:
    """Whether this kubelet may start a container in namespaces of its own (root, util-linux)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux") or not shutil.which("mount") or not os.access(UNSHARE, os.X_OK):
        return False
    try:
        probe = subprocess.run(enter_pod_argv(["hostname"], "gpuburst-probe", None, ""), timeout=10, capture_output=True, text=True)
        return probe.returncode == 0 and probe.stdout.strip() == "gpuburst-probe"
    except (OSError, subprocess.SubprocessError):
        return False


# Run in the child by util-linux ``unshare`` (new UTS and mount namespaces): name the host (a
# shell builtin write, one exec less than ``hostname``), mount what the container's fstab lists
# (``mounts.plan``: volumes at their mountPath, the pod's hosts file at /etc/hosts) in one
# ``mount --all``, go to the working directory, and exec the container's command (same pid
# throughout). A preexec_fn would do the same without two execs, but forces a fork of this whole
# process instead of a vfork, which blocks the event loop (100+ ms per container under gVisor).
# A failed mount ends the start with 128, StartError's exit code.
_ENTER_POD_SCRIPT = 'echo "$0" > /proc/sys/kernel/hostname; [ -z "$1" ] || mount --all --fstab "$1" || exit 128; [ -z "$2" ] || cd "$2" || exit 128; unset OLDPWD; shift 2; exec "$@"'


def enter_pod_argv(argv: list[str], hostname: str, fstab: Path | None, workdir: str) -> list[str]:
    """``argv`` wrapped to start in the pod's own UTS and mount namespaces, with what ``fstab``
    lists mounted, in ``workdir`` (a path in the new namespace; empty: where it was started)."""
    return [UNSHARE, "--uts", "--mount", "--", "/bin/sh", "-c", _ENTER_POD_SCRIPT, hostname, str(fstab or ""), workdir, *argv]


def enter_container_argv(pid: int, argv: list[str], workdir: str, *, network: bool = False) -> list[str]:
    """``argv`` to run in the namespaces of the container whose process is ``pid`` (exec, probes,
    hooks); in its network namespace too where the pod has one."""
    return [NSENTER, "--target", str(pid), "--uts", "--mount", *(["--net"] if network else []), f"--wdns={workdir}", "--", *argv]


async def entered(pid: int, timeout: float = 2.0) -> None:
    """Wait until the container ``pid`` has done its mounts and exec'd its program, so that what
    enters its namespaces sees them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 3)
        except OSError:
            return
        if argv0[0] not in _WRAPPERS and argv0[2:3] != [_ENTER_POD_SCRIPT.encode()]:
            return
        await asyncio.sleep(0.005)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def signal_all(processes: list[psutil.Process], sig: int) -> None:
    for child in processes:
        try:
            child.send_signal(sig)
        except psutil.Error:
            pass


async def stop_process(proc: asyncio.subprocess.Process | None, grace: float) -> None:
    """SIGTERM the container's processes, SIGKILL after ``grace`` seconds.

    A container's processes are its process group and every descendant: a child that started
    a session of its own (JupyterHub's proxy does) is still the container's, and goes with it,
    as a cgroup would take it. Processes that left the tree by double-forking are not found.
    """
    if proc is None:
        return
    family = descendants(proc.pid) if proc.returncode is None else []
    if proc.returncode is None:
        signal_group(proc.pid, signal.SIGTERM)
        signal_all(family, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(grace, 0.01))
        except TimeoutError:
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    # children that ignored SIGTERM or outlived the main process go with it
    signal_group(proc.pid, signal.SIGKILL)
    signal_all([p for p in family if p.is_running()], signal.SIGKILL)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
