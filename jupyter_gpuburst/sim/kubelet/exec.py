"""``pods/exec`` over WebSocket with the Kubernetes channel protocols.

``v4.channel.k8s.io`` (the kubernetes Python client's ``stream``) and ``v5.channel.k8s.io``
(kubectl 1.30+): every binary message starts with a channel byte, 0 stdin, 1 stdout, 2 stderr,
3 the final Status as JSON, 4 terminal resize; v5 adds 255, a client's "close this channel"
(``[255, 0]`` ends stdin). The command runs beside the container's process with its environment,
working directory and hostname, under a pseudo-terminal when ``tty=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import struct
import termios
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from jupyter_gpuburst.sim.errors import bad_request

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
# the streams asked for, as a client names them to the API server, and as kube-apiserver names them
# to the node's kubelet (ExecStdinParam, ... in k8s.io/kubernetes's pod strategy)
API_FLAGS = ("stdin", "stdout", "stderr", "tty")
KUBELET_FLAGS = ("input", "output", "error", "tty")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
Opener = Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int | None]]]


async def terminal_output(master: int) -> AsyncIterator[bytes]:
    """What a command writes to its terminal (``master``), as it comes, until the terminal closes."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:
            data = b""
        queue.put_nowait(data)
        if not data:
            loop.remove_reader(master)

    loop.add_reader(master, readable)
    try:
        while data := await queue.get():
            yield data
    finally:
        loop.remove_reader(master)


def exit_status(code: int, command: list[str]) -> dict[str, Any]:
    """The Status a kubelet sends on the error channel once the command has exited (``code`` as
    asyncio gives it: a signal's negative, reported as a shell does, 128 + the signal)."""
    code = code if code >= 0 else 128 - code
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {json.dumps(command)}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def asked(request: web.Request, name: str) -> bool:
    """Whether the exec request asks for the stream ``name`` (``1`` or ``true``)."""
    return request.query.get(name, "").lower() in ("true", "1")


async def serve(
    request: web.Request,
    namespace: str,
    name: str,
    opener: Opener | None,
    *,
    container: str | None = None,
    flags: tuple[str, str, str, str] = API_FLAGS,
) -> web.StreamResponse:
    """Answer one exec request; 400 before the upgrade for what kube-apiserver refuses.
    ``container`` is the query's unless given (a kubelet's path names it)."""
    command = request.query.getall("command", [])
    stdin, stdout, stderr, tty = (asked(request, n) for n in flags)
    container = container or request.query.get("container")
    if not (stdin or stdout or stderr):
        raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
    if tty and stderr:
        stderr = False  # a terminal has one output stream, as the kubelet merges them
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise bad_request("Upgrade request required: pods/exec is served over WebSocket (v4.channel.k8s.io, v5.channel.k8s.io)")
    if opener is None:
        raise bad_request(f'pod "{name}" is not running on a node of this cluster\'s kubelet')
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True)
    ready = ws.can_prepare(request)
    if not ready.ok or ready.protocol not in PROTOCOLS:
        raise bad_request(f"unable to upgrade connection: no supported subprotocol requested (supported: {', '.join(PROTOCOLS)})")
    # errors (no such container, not running, unknown command) are answered before the upgrade
    proc, master = await opener(namespace, name, container, command, stdin=stdin, tty=tty)
    await ws.prepare(request)
    v5 = ws.ws_protocol == PROTOCOLS[0]
    try:
        await _pump(ws, proc, master, stdin=stdin, stdout=stdout, stderr=stderr, v5=v5, command=command)
    finally:
        await end_command(proc, master)
        await ws.close()
    return ws


async def write_input(proc: asyncio.subprocess.Process, master: int | None, data: bytes) -> None:
    """What the client typed, to the command's terminal or its stdin."""
    if master is not None:
        os.write(master, data)
    elif proc.stdin is not None:
        proc.stdin.write(data)
        await proc.stdin.drain()


def end_input(proc: asyncio.subprocess.Process, master: int | None) -> None:
    """The client ended its input: end of input on a terminal, else stdin closed."""
    if master is not None:
        with contextlib.suppress(OSError):
            os.write(master, b"\x04")
    elif proc.stdin is not None:
        proc.stdin.close()


def resize_terminal(master: int, size: bytes) -> None:
    """A client's ``{"Width": .., "Height": ..}``, applied to the terminal; a malformed one is dropped."""
    with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
        parsed = json.loads(size)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", int(parsed["Height"]), int(parsed["Width"]), 0, 0))


def kill_command(proc: asyncio.subprocess.Process) -> None:
    """The command and whatever it started (its own process group), if still running."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)


async def end_command(proc: asyncio.subprocess.Process, master: int | None) -> None:
    """The exec is over (done, or its client gone): the command goes too, and its terminal."""
    kill_command(proc)
    await proc.wait()
    if master is not None:
        with contextlib.suppress(OSError):
            os.close(master)


async def _pump(
    ws: web.WebSocketResponse,
    proc: asyncio.subprocess.Process,
    master: int | None,
    *,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    v5: bool,
    command: list[str],
) -> None:
    send_lock = asyncio.Lock()

    async def send(channel: int, data: bytes) -> None:
        async with send_lock:
            if not ws.closed:
                await ws.send_bytes(bytes([channel]) + data)

    async def copy_out(reader: asyncio.StreamReader, channel: int, wanted: bool) -> None:
        while chunk := await reader.read(65536):
            if wanted:
                await send(channel, chunk)

    async def copy_tty() -> None:
        assert master is not None
        async for data in terminal_output(master):
            await send(STDOUT, data)

    async def copy_in() -> None:
        async for msg in ws:
            if msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                break
            # clients send binary frames, or text frames whose first character is the channel
            raw = msg.data.encode() if msg.type == WSMsgType.TEXT else msg.data
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT) or not raw:
                continue
            channel, data = raw[0], raw[1:]
            if channel == STDIN and stdin:
                await write_input(proc, master, data)
            elif channel == RESIZE and master is not None:
                resize_terminal(master, data)
            elif channel == CLOSE and v5 and data[:1] == bytes([STDIN]):
                end_input(proc, master)
        kill_command(proc)  # the client went away: the command goes too

    outputs = [copy_tty()] if master is not None else [copy_out(proc.stdout, STDOUT, stdout), copy_out(proc.stderr, STDERR, stderr)]
    reader = asyncio.create_task(copy_in())
    try:
        await asyncio.gather(*outputs)
        code = await proc.wait()
        await send(ERROR, json.dumps(exit_status(code, command)).encode())
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
