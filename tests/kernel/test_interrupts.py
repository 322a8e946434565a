"""A GPU kernel's interrupt (by message) stops its cell even when the SIGINT finds no wait to break.

The pod's real entry point runs ipykernel; the test talks to it as jupyter_client does.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import write_connection_file

from jupyter_gpuburst.core.keys import BACKEND_ENV, KERNEL_CONNECTION_ENV
from jupyter_gpuburst.kernel import interrupts

pytestmark = pytest.mark.skipif(interrupts.WAKE_SIGNAL is None, reason="no real-time signals on this platform")

# The state a SIGINT leaves when it arrives just before the main thread's wait: CPython has
# noted it, and the main thread sleeps on. With SIGINT blocked in the main thread, the kernel's
# SIGINT goes to another of its threads, where CPython notes it the same way, every time.
NOTED_NOT_WOKEN = (
    "import signal, time\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
    "try:\n"
    "    print('sleeping', flush=True)\n"
    "    time.sleep(60)\n"
    "finally:\n"
    "    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
)


@pytest.fixture
async def kernel(tmp_path):
    path, connection = write_connection_file(str(tmp_path / "kernel.json"), ip="127.0.0.1")
    os.unlink(path)  # the pod gets it from its environment, as from its Secret
    connection["key"] = connection["key"].decode() if isinstance(connection["key"], bytes) else connection["key"]
    env = {**os.environ, KERNEL_CONNECTION_ENV: json.dumps(connection), BACKEND_ENV: "none"}
    with open(tmp_path / "kernel.log", "w") as log:  # the kernel keeps its own copy of the fd
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_gpuburst.kernel.pod"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # as the kubelet starts a pod: ipykernel then signals its group
        )
    client = AsyncKernelClient()
    client.load_connection_info(connection)
    client.start_channels()
    try:
        await until_ready(client, proc, tmp_path / "kernel.log")
        yield client
    finally:
        client.stop_channels()
        proc.kill()
        proc.wait()


async def until_ready(client, proc, log, timeout: float = 60) -> None:
    """Until the kernel answers kernel_info and its IOPub reaches us (a SUB socket misses what
    is sent before it joins). Not jupyter_client's wait_for_ready: a client without a kernel
    manager takes one late heartbeat (a second, on a loaded machine) for a dead kernel."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the kernel ended ({proc.returncode}): {log.read_text()[-2000:]}"
        client.kernel_info()
        try:
            reply = await client.get_shell_msg(timeout=1)
            if reply["msg_type"] == "kernel_info_reply":
                await client.get_iopub_msg(timeout=1)
                return
        except queue.Empty:
            continue
    raise AssertionError(f"the kernel did not answer in {timeout} s: {log.read_text()[-2000:]}")


async def interrupt_once_running(client, code: str, wait_s: float) -> dict | None:
    """Run ``code``, send one interrupt_request once it printed; its execute_reply, or None."""
    # stop_on_error=False: an error's reply otherwise makes ipykernel abort the next request
    # that reaches it before its own note to stop aborting, and this test sends one right away
    msg_id = client.execute(code, stop_on_error=False)
    while True:
        msg = await client.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["header"]["msg_type"] == "stream":
            break
    client.control_channel.send(client.session.msg("interrupt_request", {}))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            reply = await client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        except queue.Empty:
            return None
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply
    return None


async def test_an_interrupt_noted_but_not_woken_for_still_stops_the_cell(kernel):
    started = time.monotonic()
    reply = await interrupt_once_running(kernel, NOTED_NOT_WOKEN, wait_s=20)
    assert reply is not None, "the cell slept on: the kernel never woke its main thread for the SIGINT it noted"
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - started < 20
    # the kernel goes on as before: a cell runs, and a plain interrupt stops the next one
    reply = await kernel.execute("40 + 2", reply=True, timeout=30)
    assert reply["content"]["status"] == "ok"
    reply = await interrupt_once_running(kernel, "import time; print('sleeping', flush=True); time.sleep(60)", wait_s=20)
    assert reply is not None and reply["content"]["ename"] == "KeyboardInterrupt"


async def test_a_wake_after_the_cell_ended_leaves_the_next_cell_alone(kernel):
    """The wakes are for the interrupted cell: once it ended, the next one (which here counts
    the wake signals it gets) runs untouched."""
    reply = await interrupt_once_running(kernel, "import time; print('sleeping', flush=True); time.sleep(60)", wait_s=20)
    assert reply is not None and reply["content"]["ename"] == "KeyboardInterrupt"
    counting = (
        "import signal, time\n"
        f"woken = []\nsignal.signal({int(interrupts.WAKE_SIGNAL)}, lambda *a: woken.append(a))\n"
        f"time.sleep({max(interrupts.WAKE_AFTER_S) + 1})\n"
        "len(woken)"
    )
    reply = await kernel.execute(counting, reply=True, timeout=30)
    assert reply["content"]["status"] == "ok"
    result = await last_result(kernel, reply["parent_header"]["msg_id"])
    assert result == "0"


async def last_result(client, msg_id: str) -> str | None:
    while True:
        msg = await client.get_iopub_msg(timeout=10)
        if msg["parent_header"].get("msg_id") == msg_id and msg["header"]["msg_type"] == "execute_result":
            return msg["content"]["data"]["text/plain"]


def test_without_real_time_signals_the_kernel_keeps_ipykernels_interrupt(monkeypatch):
    monkeypatch.setattr(interrupts, "WAKE_SIGNAL", None)
    handlers = {"interrupt_request": object()}
    kernel = SimpleNamespace(control_handlers=dict(handlers))
    assert interrupts.install(kernel, SimpleNamespace()) is False
    assert kernel.control_handlers == handlers
