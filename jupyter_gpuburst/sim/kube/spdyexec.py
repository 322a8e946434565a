"""``pods/exec`` over SPDY as a kubelet serves it (``v4.channel.k8s.io``): what kube-apiserver
sends a kubelet for a client that offered ``v5.channel.k8s.io``.

After the upgrade the client opens a stream for each of the command's channels (``streamtype``:
``error``, then ``stdin``, ``stdout``, ``stderr`` as asked, and ``resize`` with a terminal), as
the kubelet's ``remotecommand`` server waits for them; the command's output goes out on its
streams, its input comes in until the client ends its stream, and once it has exited its Status
goes out on the error stream and every stream ends.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from jupyter_gpuburst.sim.kube import spdy
from jupyter_gpuburst.sim.kubelet.exec import end_command, end_input, exit_status, resize_terminal, terminal_output, write_input

# what this side speaks after the upgrade, best first (v5 over SPDY is v4: its close signal is
# a WebSocket matter, and SPDY ends a stream by itself)
PROTOCOLS = ("v4.channel.k8s.io",)
STREAMS_WITHIN_S = 30.0  # the kubelet's streamCreationTimeout


class _Upgrade(web.StreamResponse):
    """A 101 after which the connection is the handler's, as aiohttp's WebSocketResponse does it:
    no length and no chunking."""

    _length_check = False


def negotiate(request: web.Request) -> str | None:
    """The protocol this side speaks of those the client offers (X-Stream-Protocol-Version)."""
    offered = [p.strip() for value in request.headers.getall("X-Stream-Protocol-Version", []) for p in value.split(",")]
    return next((p for p in offered if p in PROTOCOLS), None)


async def serve(
    request: web.Request, opened: tuple[asyncio.subprocess.Process, int | None], protocol: str, wanted: dict[str, bool], command: list[str]
) -> web.StreamResponse:
    """Upgrade, take the client's streams and run the opened command over them."""
    proc, master = opened
    response = _Upgrade(status=101, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": protocol})
    await response.prepare(request)
    transport = request.transport
    assert transport is not None
    session = spdy.Session(transport.write)
    request.protocol.set_parser(session)  # type: ignore[arg-type] - feed_data/feed_eof, as aiohttp's own WebSocket reader
    request.protocol.keep_alive(False)
    try:
        streams = await _streams(session, wanted)
        if streams is not None:
            await _run(streams, proc, master, command)
    finally:
        await end_command(proc, master)
        session.goaway()
        session.end()
        transport.close()
    return response


async def _streams(session: spdy.Session, wanted: dict[str, bool]) -> dict[str, spdy.Stream] | None:
    expected = {"error", *(name for name, on in wanted.items() if on)}
    streams: dict[str, spdy.Stream] = {}
    try:
        async with asyncio.timeout(STREAMS_WITHIN_S):
            while not expected <= set(streams):
                stream = await session.streams.get()
                if stream is None:
                    return None
                streams[stream.headers.get("streamtype", "")] = stream
    except TimeoutError:
        return None
    return streams


async def _run(streams: dict[str, spdy.Stream], proc: asyncio.subprocess.Process, master: int | None, command: list[str]) -> None:
    async def copy_out(reader: asyncio.StreamReader | None, name: str) -> None:
        while reader is not None and (chunk := await reader.read(65536)):
            if name in streams:
                streams[name].write(chunk)

    async def copy_tty() -> None:
        assert master is not None
        async for data in terminal_output(master):
            streams["stdout"].write(data)

    async def copy_in() -> None:
        stdin = streams.get("stdin")
        while stdin is not None and (data := await stdin.received.get()) is not None:
            await write_input(proc, master, data)
        end_input(proc, master)

    async def resize() -> None:
        stream = streams.get("resize")
        while stream is not None and master is not None and (data := await stream.received.get()) is not None:
            for line in data.splitlines():  # a stream's data may carry several sizes at once
                resize_terminal(master, line)

    outputs = [copy_tty()] if master is not None else [copy_out(proc.stdout, "stdout"), copy_out(proc.stderr, "stderr")]
    inputs = [asyncio.create_task(copy_in()), asyncio.create_task(resize())]
    try:
        await asyncio.gather(*outputs)
        code = await proc.wait()
        streams["error"].write(json.dumps(exit_status(code, command)).encode())
        for stream in streams.values():
            stream.close()
    finally:
        for task in inputs:
            task.cancel()
        await asyncio.gather(*inputs, return_exceptions=True)
