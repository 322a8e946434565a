"""A minimal Server-Sent Events client over a raw HTTP/1.1 connection, as a browser sees it."""

from __future__ import annotations

import asyncio
import json
import urllib.parse


class ChunkDecoder:
    """Undo HTTP/1.1 chunked transfer encoding incrementally."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        self.pending += data
        out = b""
        while b"\r\n" in self.pending:
            size_line, rest = self.pending.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                break
            out += rest[:size]
            self.pending = rest[size + 2 :]
        return out


def parse_events(text: bytes) -> tuple[list[tuple[str, dict]], bytes]:
    """Complete events in `text` and the unparsed rest; comments (keepalives) are skipped."""
    events = []
    while b"\n\n" in text:
        block, text = text.split(b"\n\n", 1)
        name, data = None, None
        for line in block.decode().split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
        if name is not None:
            events.append((name, data))
    return events, text


async def read_sse(port: int, path: str, headers: dict[str, str], events: int, timeout: float = 10.0):
    """GET an event stream; return (status line, headers text, the first `events` events, raw body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}\r\n".encode())
        await writer.drain()
        raw_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status, _, header_text = raw_head.decode().partition("\r\n")
        chunked = "transfer-encoding: chunked" in header_text.lower()
        if " 200 " not in status:
            length = next(
                (int(line.split(":")[1]) for line in header_text.lower().splitlines() if line.startswith("content-length:")),
                0,
            )
            body = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
            return status, header_text, [], body
        decoder = ChunkDecoder()
        parsed: list[tuple[str, dict]] = []
        body, unparsed = b"", b""
        while len(parsed) < events:
            chunk = await asyncio.wait_for(reader.read(65536), timeout)
            if not chunk:
                break
            data = decoder.feed(chunk) if chunked else chunk
            body += data
            new, unparsed = parse_events(unparsed + data)
            parsed.extend(new)
        return status, header_text, parsed[:events], body
    finally:
        writer.close()


def url(base_url: str, *parts: str, **query: str) -> str:
    path = base_url.rstrip("/") + "/" + "/".join(parts)
    return path + ("?" + urllib.parse.urlencode(query) if query else "")
