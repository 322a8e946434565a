"""Entry point of a GPU kernel's pod: write the connection file privately, then run ipykernel.

The connection (with its key) arrives in an environment variable filled from a Secret. It is
removed from the environment, so code in the kernel and its child processes do not inherit it,
and written to a file only this user can read, which is deleted once ipykernel has read it (or
the pod is stopped first): the key then lives only in the kernel's memory, and no copy is left
on disk where a container's files outlive it (the emulator's pods are processes on the host).
A note from the hub (scratch space, a restart on another site) is printed once, with the output
of the first cell run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from typing import Any

from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_ENV as CONNECTION_ENV
from jupyter_gpuburst.core.keys import KERNEL_NOTE_ENV as NOTE_ENV
from jupyter_gpuburst.core.keys import KERNEL_SCRATCH_ENV as SCRATCH_ENV


def write_connection_file(environ: dict[str, str]) -> str:
    raw = environ.pop(CONNECTION_ENV, "")
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
    """Print ``note`` with the first cell's output, then never again."""

    def first_cell(*_args) -> None:
        shell.events.unregister("pre_run_cell", first_cell)
        print(note, flush=True)

    shell.events.register("pre_run_cell", first_cell)


def main(argv: list[str] | None = None) -> None:
    connection_file = write_connection_file(os.environ)
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
    if note and app.shell is not None:
        note_once(app.shell, note)
    app.start()


if __name__ == "__main__":
    main()
