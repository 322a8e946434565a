"""An interrupt that stops a GPU kernel's cell even when its SIGINT lands just before a wait.

A GPU kernel is interrupted by message (its pod may be on another cluster): ipykernel's control
thread answers ``interrupt_request`` by sending SIGINT to its own process. CPython's handler only
notes the signal; the main thread raises KeyboardInterrupt at its next check between bytecodes,
or at once when the signal breaks the system call it waits in. A SIGINT that arrives after the
main thread's last check but before it enters its wait (``time.sleep``, a lock, a socket read)
breaks nothing: the note waits until that call returns on its own, a minute later for a
``time.sleep(60)``, and the interrupt looks lost. The window is short, but it is where the
interrupt tends to land: the control thread needs the GIL to handle the request, and a main
thread on its way into a wait hands the GIL over right there (CPython drops it before the
system call, and waits for another thread to take it when one asked). On a loaded node the main
thread may then not run again until the SIGINT has come and gone.

So after an interrupt the kernel wakes its main thread a few times over some seconds, while the
cell that was running is still running: a signal of its own (``WAKE_SIGNAL``), whose handler
does nothing, breaks the wait, and CPython then runs every handler noted, SIGINT's among them.
Where the SIGINT was already taken, a wake costs one system call restarted (PEP 475).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from typing import Any

# a real-time signal, which Python, ipykernel and the GPU libraries leave alone (SIGUSR1 and
# SIGUSR2 are user code's); only this process's main thread is sent it, never a child
WAKE_SIGNAL: int | None = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else None
# after the SIGINT: the first wake once the control thread has let go of the GIL, the last for
# a node so loaded that the main thread ran not once in seconds
WAKE_AFTER_S = (0.05, 0.3, 1.0, 3.0)


class Cells:
    """Which cell runs, if any: a wake is for the cell that was interrupted, not a later one.

    IPython ends even an empty cell (``post_execute``) that it never started, so this keeps a
    flag and a count of cells started, not two counts that such a cell would put out of step."""

    def __init__(self) -> None:
        self.started = 0
        self.running = False

    def start(self, *_args: Any) -> None:
        self.started += 1
        self.running = True

    def end(self, *_args: Any) -> None:
        self.running = False


def _wake(_signum: int, _frame: Any) -> None:
    """Nothing: the signal is sent to break the main thread's wait."""


def install(kernel: Any, shell: Any) -> bool:
    """Wake the main thread after each interrupt (from the main thread, before the kernel
    starts: only it may set a signal handler). False where the platform has no way to."""
    if WAKE_SIGNAL is None or shell is None or not hasattr(signal, "pthread_kill"):
        return False
    signal.signal(WAKE_SIGNAL, _wake)
    cells = Cells()
    # pre/post_execute, not pre/post_run_cell: a silent execute (a widget's) is interrupted too
    shell.events.register("pre_execute", cells.start)
    shell.events.register("post_execute", cells.end)
    main = threading.main_thread()
    send_interrupt = kernel.control_handlers["interrupt_request"]

    def wake_if_running(cell: int) -> None:
        if cells.running and cells.started == cell and main.is_alive():
            with contextlib.suppress(OSError):  # the kernel is on its way out
                signal.pthread_kill(main.ident, WAKE_SIGNAL)

    async def interrupt_request(stream: Any, ident: Any, parent: Any) -> None:
        cell = cells.started if cells.running else None
        await send_interrupt(stream, ident, parent)
        if cell is not None:
            loop = asyncio.get_running_loop()
            for delay in WAKE_AFTER_S:
                loop.call_later(delay, wake_if_running, cell)

    kernel.control_handlers["interrupt_request"] = interrupt_request
    return True
