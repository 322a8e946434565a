"""The demo's proxy passes responses on as they arrive (event streams), and still proxies plain ones."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EventStream(web.RequestHandler):
    """Sends one event, then holds the stream open until the test is over."""

    async def get(self):
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("X-Upstream", "yes")
        self.write(b"event: sample\ndata: {\"n\": 1}\n\n")
        await self.flush()
        await asyncio.sleep(30)


class Plain(web.RequestHandler):
    def get(self):
        self.set_status(418)
        self.write({"teapot": True})


@pytest.fixture
async def upstream():
    app = web.Application([(r"/stream", EventStream), (r"/plain", Plain)])
    port = free_port()
    server = app.listen(port, address="127.0.0.1")
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def proxy(upstream):
    port, api_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.proxy", "--ip", "127.0.0.1", "--port", str(port),
         "--api-ip", "127.0.0.1", "--api-port", str(api_port), "--default-target", upstream],
        env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": "test-only-token"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


async def test_event_stream_arrives_before_the_response_ends(proxy):
    chunks: list[bytes] = []
    got_first = asyncio.Event()
    headers = {}

    def on_chunk(chunk: bytes) -> None:
        chunks.append(chunk)
        got_first.set()

    def on_header(line: str) -> None:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()

    request = HTTPRequest(f"{proxy}/stream", streaming_callback=on_chunk, header_callback=on_header, request_timeout=60)
    fetch = asyncio.ensure_future(AsyncHTTPClient(force_instance=True).fetch(request, raise_error=False))
    try:
        await asyncio.wait_for(got_first.wait(), timeout=10)
    finally:
        fetch.cancel()
    assert b"event: sample" in b"".join(chunks)
    assert headers["content-type"] == "text/event-stream"
    assert headers["x-upstream"] == "yes"
    assert "content-length" not in headers


async def test_plain_responses_keep_status_and_body(proxy):
    response = await AsyncHTTPClient(force_instance=True).fetch(f"{proxy}/plain", raise_error=False)
    assert response.code == 418
    assert response.body == b'{"teapot": true}'


async def test_unreachable_target_is_a_503(upstream):
    port, api_port, dead = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.proxy", "--ip", "127.0.0.1", "--port", str(port),
         "--api-ip", "127.0.0.1", "--api-port", str(api_port), "--default-target", f"http://127.0.0.1:{dead}"],
        env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": "test-only-token"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        response = await AsyncHTTPClient(force_instance=True).fetch(f"http://127.0.0.1:{port}/x", raise_error=False)
        assert response.code == 503
    finally:
        proc.terminate()
        proc.wait(10)
