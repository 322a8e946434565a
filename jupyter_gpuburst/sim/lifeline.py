"""A process that ends when the process that started it is gone, however that one ended.

The benchmarks start the federation (``gpuburst sim``) and JupyterHub in sessions of their own,
so that a Ctrl-C in the terminal reaches the benchmark alone and it stops them in order. That
order needs the benchmark alive: one killed outright (SIGKILL, the OOM killer, a supervisor's
timeout after its SIGTERM) left them running, a federation with hundreds of pod processes
among them. A child that watches its parent stops itself the same way SIGTERM would stop it.

The parent is polled (``os.getppid`` changes once the parent is gone and the child is
reparented): ``PR_SET_PDEATHSIG`` would be immediate, but it fires when the *thread* that forked
the child ends, and an asyncio program may fork from any of its threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

PERIOD_S = 0.5


def on_parent_exit(callback: Callable[[], None], parent: int | None = None, period_s: float = PERIOD_S) -> threading.Thread:
    """Call ``callback`` once, from a daemon thread, when ``parent`` (this process's parent now,
    by default) is no longer this process's parent."""
    expected = os.getppid() if parent is None else parent

    def watch() -> None:
        stopped = threading.Event()
        while os.getppid() == expected:
            stopped.wait(period_s)
        callback()

    thread = threading.Thread(target=watch, name="gpuburst-lifeline", daemon=True)
    thread.start()
    return thread
