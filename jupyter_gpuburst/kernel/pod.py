"""Entry point of a GPU kernel's pod: write the connection file privately, then run ipykernel.

The connection (with its key) arrives in an environment variable filled from a Secret. It is
removed from the environment, so code in the kernel and its child processes do not inherit it,
and written to a file only this user can read, which is deleted once ipykernel has read it (or
the pod is stopped first): the key then lives only in the kernel's memory, and no copy is left
on disk where a container's files outlive it (the emulator's pods are processes on the host).
A note from the hub (scratch space, a restart on another site) is printed once, with the output
of the first cell run.

A pre-started kernel (a warm pool's) has no connection yet: it imports ipykernel (and the GPU
libraries named in its env, where installed) and waits for the two files that the hub writes,
at adoption, into the Secret volume it mounts: the connection, and the adopter's env (its user).
The key is new for each adopter and reaches the pod only then.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Any

from jupyter_gpuburst.core.keys import KERNEL_ADOPTER_FILE as ADOPTER_FILE
from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_DIR_ENV as CONNECTION_DIR_ENV
from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_ENV as CONNECTION_ENV
from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_FILE as CONNECTION_FILE
from jupyter_gpuburst.core.keys import KERNEL_NOTE_ENV as NOTE_ENV
from jupyter_gpuburst.core.keys import KERNEL_POD_IP_ENV as POD_IP_ENV
from jupyter_gpuburst.core.keys import KERNEL_PRELOAD_ENV as PRELOAD_ENV
from jupyter_gpuburst.core.keys import KERNEL_READY_PORT_ENV as READY_PORT_ENV
from jupyter_gpuburst.core.keys import KERNEL_SCRATCH_ENV as SCRATCH_ENV

# how often a pre-started kernel looks for its connection without inotify (none on another OS,
# or a node's 128 inotify instances a user taken): an adoption waits at most this much longer
POLL_S = 0.1
FALLBACK_POLL_S = 1.0  # with inotify, a look now and then all the same


def write_connection_file(environ: dict[str, str], raw: str | None = None) -> str:
    raw = environ.pop(CONNECTION_ENV, "") if raw is None else raw
    if not raw:
        raise SystemExit(f"{CONNECTION_ENV} is not set: this pod was not started by jupyter-gpuburst")
    json.loads(raw)  # fail here, not in ipykernel, on a malformed connection
    directory = tempfile.mkdtemp(prefix="gpuburst-kernel-")  # 0700
    path = os.path.join(directory, "kernel.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(raw)
    return path


def remove_on_termination(directory: str) -> Any:
    """Until the kernel has read its connection file: a pod stopped meanwhile (SIGTERM, while
    IPython is still importing) removes the file's directory before it ends. Returns the
    handler it replaced, to put back."""

    def stop(signum: int, _frame: object) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # end as the signal would have ended it

    return signal.signal(signal.SIGTERM, stop)


def preload(environ: dict[str, str]) -> list[str]:
    """Import now what every kernel imports (ipykernel) and the GPU libraries named in
    ``PRELOAD_ENV`` that are installed: the adopter's kernel then starts without that wait."""
    import ipykernel.kernelapp  # noqa: F401

    import jupyter_gpuburst.kernel.gpu  # noqa: F401

    loaded = []
    for name in filter(None, (n.strip() for n in environ.get(PRELOAD_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not installed (or broken) here: the kernel imports it itself if it can
            continue
        loaded.append(name)
    return loaded


class ReadyPort:
    """While a pre-started kernel waits: a listener on its heartbeat port that takes the
    kubelet's TCP readiness probe (accepted and closed, nothing read or written), so the pod is
    Ready once its imports are done. Closed before ipykernel binds the port itself.

    Its thread sleeps in ``accept`` (no timeout to wake for): a pool of hundreds of waiting
    kernels on one node costs nothing between probes. ``close`` wakes it.
    """

    def __init__(self, ip: str, port: int) -> None:
        self.address = ("127.0.0.1" if ip in ("0.0.0.0", "") else ip, port)
        self.socket = socket.create_server((ip, port))  # SO_REUSEADDR: ipykernel binds it next
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="ready-port", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            conn.close()
            if self.done.is_set():
                return

    def close(self) -> None:
        self.done.set()
        # Linux wakes an accept on a socket shut down; elsewhere a connection wakes it
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.thread.join(0.5)
        if self.thread.is_alive():
            with contextlib.suppress(OSError), socket.create_connection(self.address, timeout=1):
                pass
            self.thread.join(2)
        self.socket.close()


def hold_ready_port(environ: dict[str, str]) -> ReadyPort | None:
    port = environ.pop(READY_PORT_ENV, "")
    if not port.isdigit():
        return None
    return ReadyPort(environ.get(POD_IP_ENV) or "0.0.0.0", int(port))


class DirectoryChanges:
    """Linux inotify on one directory, through libc: a waiting kernel sleeps until the kubelet
    writes into its Secret volume (a file created, or the ``..data`` link renamed into place
    as a kubelet updates a Secret volume) instead of looking every ``POLL_S``: hundreds of
    waiting kernels on a node then cost no CPU. ``open`` returns None where inotify is not
    available (another OS, a restricted runtime); the caller polls instead."""

    # <sys/inotify.h>
    IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x4, 0x8, 0x80, 0x100

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)

    @classmethod
    def open(cls, directory: str) -> DirectoryChanges | None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        mask = cls.IN_ATTRIB | cls.IN_CLOSE_WRITE | cls.IN_MOVED_TO | cls.IN_CREATE
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout: float) -> None:
        """Until something in the directory changed, or ``timeout`` passed (a safety net)."""
        if self.poller.poll(timeout * 1000):
            with contextlib.suppress(BlockingIOError):
                while os.read(self.fd, 4096):
                    pass

    def close(self) -> None:
        os.close(self.fd)


def _adoption(directory: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The connection and the adopter's record, once both files are whole.

    The hub writes both in one Secret, but the kubelet shows a Secret's new keys one file at a
    time (it swaps its data directory at once, then links each new key's file): the connection
    can be there before the adopter's env, and a kernel that went on then would run without its
    user.
    """
    try:
        with open(os.path.join(directory, CONNECTION_FILE)) as fh:
            connection = json.load(fh)
        with open(os.path.join(directory, ADOPTER_FILE)) as fh:
            adopter = json.load(fh)
    except (OSError, ValueError):  # not there yet (or half there): the kubelet writes it soon
        return None
    return connection, adopter if isinstance(adopter, dict) else {}


def wait_for_adoption(environ: dict[str, str], poll: float = POLL_S) -> str:
    """Wait until the hub has written this kernel's connection and its adopter's env into the
    mounted Secret volume; put that env into ``environ``; return the connection (as JSON)."""
    directory = environ.pop(CONNECTION_DIR_ENV)
    changes = DirectoryChanges.open(directory)
    try:
        while (adoption := _adoption(directory)) is None:
            if changes is None:
                time.sleep(poll)
            else:
                changes.wait(FALLBACK_POLL_S)
    finally:
        if changes is not None:
            changes.close()
    connection, adopter = adoption
    for name, value in (adopter.get("env") or {}).items():
        if isinstance(name, str) and isinstance(value, str):
            environ[name] = value
    pod_ip = environ.pop(POD_IP_ENV, "")
    if pod_ip and connection.get("ip") == "0.0.0.0":
        # the pod's own address: the same interface a pod's network has, and where pods share
        # a host's network (the emulator) the only one that is this pod's alone
        connection["ip"] = pod_ip
    return json.dumps(connection)


def enter_scratch(environ: dict[str, str]) -> str | None:
    """Move into the scratch mount; where none is mounted, into a fresh private directory."""
    scratch = environ.get(SCRATCH_ENV, "")
    if not scratch:
        return None
    if not (os.path.isdir(scratch) and os.access(scratch, os.W_OK)):
        scratch = tempfile.mkdtemp(prefix="gpuburst-scratch-")
    os.chdir(scratch)
    return scratch


def note_once(shell, note: str) -> None:
    """Print ``note`` with the first cell's output, then never again.

    Written, never flushed: IPython runs the callback before the cell's code and swallows what
    it raises, KeyboardInterrupt included. A flush waits for ipykernel's IO thread, a while on
    a loaded node, and an interrupt that landed in that wait was lost: the cell ran on, with no
    reply for as long as it ran. The note goes out with the cell's first output, or at the IO
    thread's next flush.
    """

    def first_cell(*_args) -> None:
        shell.events.unregister("pre_run_cell", first_cell)
        print(note)

    shell.events.register("pre_run_cell", first_cell)


def main(argv: list[str] | None = None) -> None:
    raw = None
    if CONNECTION_ENV not in os.environ and os.environ.get(CONNECTION_DIR_ENV):
        loaded = preload(os.environ)
        ready = hold_ready_port(os.environ)  # Ready from now: an adoption takes no import
        print(f"Pre-started kernel ready ({', '.join(['ipykernel', *loaded])} imported): waiting for its connection", flush=True)
        raw = wait_for_adoption(os.environ)
        if ready is not None:
            # the kernel's own heartbeat takes the port (and the probe) from here; a client
            # that connects meanwhile is queued by ZMQ until it binds, a moment later
            ready.close()
    connection_file = write_connection_file(os.environ, raw)
    previous = remove_on_termination(os.path.dirname(connection_file))
    enter_scratch(os.environ)
    note = os.environ.pop(NOTE_ENV, "").strip()
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    try:
        app.initialize(["-f", connection_file, *(argv if argv is not None else sys.argv[1:])])
    finally:
        # ipykernel reads the file and writes its final ports there during initialize, never after
        shutil.rmtree(os.path.dirname(connection_file), ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    # the kernel's own GPU use, for the panel of the user's server (see .gpu); before the
    # note, whose pre_run_cell callback unregisters itself while IPython runs the callbacks
    from jupyter_gpuburst.kernel.gpu import install_in_kernel, reporter_from_env

    install_in_kernel(app.kernel, app.shell, reporter_from_env(os.environ))
    # an interrupt whose SIGINT lands just before the cell's wait must still stop the cell
    from jupyter_gpuburst.kernel import interrupts

    interrupts.install(app.kernel, app.shell)
    if note and app.shell is not None:
        note_once(app.shell, note)
    app.start()


if __name__ == "__main__":
    main()
