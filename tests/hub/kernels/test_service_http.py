"""The ``gpuburst`` service's HTTP server: a caller's address is what its connection says unless
the admin puts the service behind a trusted proxy, and a body past the limit gets 413."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets.config import Config

from jupyter_gpuburst.hub import service as service_module
from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.hub.service import CapacityService, GPUBurstService
from jupyter_gpuburst.hub.tokenapi import MAX_BODY_BYTES


@pytest.fixture
def started(monkeypatch):
    logged: list[str] = []
    monkeypatch.setattr(service_module.access_log, "log", lambda level, msg, *args: logged.append(msg % args))
    services: list[CapacityService] = []

    def start(trusted: bool | None) -> CapacityService:
        (port,) = free_ports(1)
        service = CapacityService(lambda: None, "127.0.0.1", port, "127.0.0.1")
        service.config = Config()
        if trusted is not None:
            service.config.GPUBurstService.behind_trusted_proxy = trusted
        service.start()
        services.append(service)
        return service

    start.logged = logged
    yield start
    for service in services:
        service._server.stop()


async def fetch(service: CapacityService, method: str = "GET", body: bytes | None = None, path: str = "") -> int:
    try:
        response = await AsyncHTTPClient().fetch(
            f"{service.url}{service.prefix}{path}",
            method=method,
            body=body,
            follow_redirects=False,
            headers={"X-Forwarded-For": "10.9.8.7"},
        )
    except HTTPClientError as exc:
        return exc.code
    return response.code


def test_the_proxy_is_not_trusted_unless_the_admin_says_so():
    assert GPUBurstService().behind_trusted_proxy is False
    assert "X-Forwarded-For" in GPUBurstService.class_traits()["behind_trusted_proxy"].help


@pytest.mark.parametrize(("trusted", "seen"), [(None, "127.0.0.1"), (False, "127.0.0.1"), (True, "10.9.8.7")])
async def test_a_forwarded_address_is_taken_only_behind_a_trusted_proxy(started, trusted, seen):
    service = started(trusted)
    assert await fetch(service) == 302  # to the capacity page
    (line,) = started.logged
    assert line.startswith(f"302 GET {service.prefix} ({seen})"), line


async def test_a_body_past_the_limit_is_refused_before_anything_reads_it(started):
    service = started(None)
    # the admins' capacity API (the token APIs have tests of their own)
    assert await fetch(service, "POST", b" " * (MAX_BODY_BYTES + 1), "api/capacity") == 413
    # and nothing past the read ceiling is buffered at all (Tornado's own default is 100 MB)
    assert service._server.conn_params.max_body_size == service_module.READ_BODY_CEILING < 100 * 1024 * 1024


async def test_a_refused_token_s_reply_says_the_connection_closes(started, monkeypatch):
    # Tornado closes the connection after a refusal in prepare() (the streamed body unread): a
    # proxy that reused that socket for the next call got a reset, which a student saw as a 503
    async def unknown(token, sync=False):
        return None

    monkeypatch.setattr(CapacityService, "hub_auth", lambda self: SimpleNamespace(user_for_token=unknown))
    service = started(None)
    host, port = service.url.split("//", 1)[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port.rstrip("/")))
    try:
        # a keep-alive client, as the proxy is (Tornado's own client always asks to close)
        request = f"GET {service.prefix}api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: token nobody-has-this\r\n\r\n"
        writer.write(request.encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
    finally:
        writer.close()
    assert head.startswith("http/1.1 403")
    assert "\r\nconnection: close\r\n" in head
