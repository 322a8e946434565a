"""GET /api/gpuburst/stream: Server-Sent Events."""

from __future__ import annotations

import asyncio

import pytest
from sse_client import read_sse, url


async def open_stream(port: int, base_url: str, auth_header: dict) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw HTTP request for the stream, read as it arrives (not as an SSE client would parse it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "".join(f"{k}: {v}\r\n" for k, v in auth_header.items())
    writer.write(f"GET {url(base_url, 'api', 'gpuburst', 'stream')} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
    await writer.drain()
    return reader, writer


async def test_stream_sends_placement_then_samples(http_server, jp_http_port, jp_base_url, jp_auth_header, jp_serverapp):
    status, headers, events, raw = await read_sse(jp_http_port, url(jp_base_url, "api", "gpuburst", "stream"), jp_auth_header, events=3)
    assert " 200 " in status
    assert "content-type: text/event-stream" in headers.lower()
    assert [name for name, _ in events] == ["placement", "sample", "sample"]
    placement, first, second = (data for _, data in events)
    assert placement["site"] == "standalone"
    assert first["simulated"] is True and len(first["gpus"]) == 2
    assert second["timestamp"] > first["timestamp"]
    assert raw.count(b"\ndata: ") == 3  # one data line per event


@pytest.mark.parametrize(
    "gpuburst_config",
    [{"backend": "simulated", "sampling_period_s": 0.05, "process_sampling_period_s": 0.05, "keepalive_s": 0.05}],
)
async def test_stream_keepalive_and_sampling_stops_after_disconnect(http_server, jp_http_port, jp_base_url, jp_auth_header, jp_serverapp):
    sampler = jp_serverapp.web_app.settings["gpuburst_sampler"]
    path = url(jp_base_url, "api", "gpuburst", "stream")
    clients = [read_sse(jp_http_port, path, jp_auth_header, events=3) for _ in range(10)]
    loop = asyncio.get_running_loop()
    before, began = sampler.stats.samples, loop.time()
    results = await asyncio.gather(*clients)
    took = loop.time() - began
    assert all(len(events) == 3 for _s, _h, events, _r in results)
    # ten clients share one sampler at its period (each on its own would take 20 samples at least):
    # counted against the time they took, which a loaded machine stretches past a few periods
    assert sampler.stats.samples - before <= took / 0.05 + 2
    for _ in range(100):  # disconnected clients unsubscribe; the lease runs out; sampling stops
        if not sampler.running:
            break
        await asyncio.sleep(0.05)
    assert not sampler.running and sampler.listeners == 0


@pytest.mark.parametrize(
    "gpuburst_config",
    [{"backend": "simulated", "sampling_period_s": 5.0, "process_sampling_period_s": 5.0, "keepalive_s": 0.1}],
)
async def test_keepalive_comment_when_no_sample(http_server, jp_http_port, jp_base_url, jp_auth_header):
    reader, writer = await open_stream(jp_http_port, jp_base_url, jp_auth_header)
    try:
        raw = b""
        # a loaded machine can take longer than a keepalive's 0.1 s for the first sample: the
        # keepalive that counts is one after it
        while b": keepalive\n\n" not in raw.partition(b"event: sample")[2]:
            raw += await asyncio.wait_for(reader.read(65536), 5)
        assert raw.count(b"event: sample") == 1  # the first sample, then only keepalives for now
    finally:
        writer.close()


@pytest.mark.parametrize(
    "gpuburst_config",
    [{"backend": "simulated", "sampling_period_s": 5.0, "process_sampling_period_s": 5.0, "keepalive_s": 30.0}],
)
async def test_a_stopping_server_tells_open_streams_at_once(http_server, jp_http_port, jp_base_url, jp_auth_header, jp_serverapp):
    reader, writer = await open_stream(jp_http_port, jp_base_url, jp_auth_header)
    try:
        raw = b""
        while b"event: sample" not in raw:
            raw += await asyncio.wait_for(reader.read(65536), 5)
        # the next sample is 5 s away and the next keepalive 30 s: the stream waits, then hears
        [extension] = jp_serverapp.extension_manager.extension_apps["jupyter_gpuburst"]
        loop = asyncio.get_running_loop()
        began = loop.time()
        stopped = asyncio.ensure_future(extension.stop_extension())
        while b"event: stopping\n" not in raw:
            raw += await asyncio.wait_for(reader.read(65536), 2)
        assert loop.time() - began < 3.0  # at once: not the next sample (5 s) nor keepalive (30 s)
        await stopped
    finally:
        writer.close()
