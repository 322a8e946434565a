"""Test hubs forked from a process that has already imported JupyterHub: multiprocessing's
forkserver, ``jupyterhub.app`` preloaded, one per pytest worker.

Imports are most of a hub's start, ``jupyterhub.app`` 1.4 s of them. A forked hub still runs
JupyterHub's own ``main`` with its own argv, working directory, environment and log, in a
session of its own, as the subprocess it replaces did; it is spared only that import. Only
modules that read no environment a hub is given may be preloaded: kubernetes_asyncio reads
``KUBECONFIG`` when it is imported (``KUBE_CONFIG_DEFAULT_LOCATION``), so KubeSpawner and our
hub package are imported in each hub, after its environment is set. The benchmarks do not use
this: they measure a hub as an admin starts one.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jupyter_gpuburst.sim.lifeline import on_parent_exit

PRELOAD = ["jupyterhub.app"]
# a forked hub is named as the `jupyterhub` command's process is (ps, pgrep, process accounting)
PROGRAM_NAME = b"jupyterhub"
PR_SET_NAME = 15
SESSION_WAIT_S = 30.0


class PreloadedHub:
    """What the tests use of ``subprocess.Popen`` for a hub: ``pid``, ``poll()``, ``returncode``,
    ``wait()``. Its parent is the forkserver, which reports how it ended. Daemonic: one still
    running when its pytest worker ends gets multiprocessing's SIGTERM then."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self.args = argv
        self._process = context.Process(target=_run_hub, args=(argv, str(cwd), env, str(log_path)), name="jupyterhub", daemon=True)
        self._process.start()
        self.pid: int = self._process.pid
        self._wait_for_session()

    def _wait_for_session(self) -> None:
        """Until the hub leads a session of its own, a signal to its group would miss it."""
        deadline = time.monotonic() + SESSION_WAIT_S
        while time.monotonic() < deadline and self.poll() is None:
            try:
                if os.getsid(self.pid) == self.pid:
                    return
            except ProcessLookupError:
                return
            time.sleep(0.005)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode


def _run_hub(argv: list[str], cwd: str, env: dict[str, str], log_path: str) -> None:
    """In the forked child: become what ``subprocess.Popen(argv, cwd=, env=, stdout=log,
    stderr=STDOUT, start_new_session=True)`` would have started, then run JupyterHub."""
    # named first: once its session is its own (what the parent waits for), it is a hub by name too
    ctypes.CDLL(None).prctl(PR_SET_NAME, PROGRAM_NAME, 0, 0, 0)
    # The forkserver hands each child the write ends of its own pipe and the resource tracker's,
    # so that both outlive their client while a child lives; a hub ends when its parent (the
    # forkserver) does (the config's lifeline), so a hub kept the forkserver and itself running
    # after a stopped run. A process the subprocess module starts inherits no such descriptor:
    # neither does this one. The forkserver is our parent until then (it waits for that end), so
    # the lifeline set here, before the config's, cannot miss its going.
    forkserver = os.getppid()
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    on_parent_exit(lambda: os.kill(os.getpid(), signal.SIGTERM), parent=forkserver)
    # before the session, which is what the parent waits for: as with Popen's stdout, the log
    # exists once the hub's constructor returns (a test reading it at once found none)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv)
    from jupyterhub.app import main

    main()
