"""The gpuburst service's access log: errors are what an admin must look into."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from jupyter_gpuburst.hub import service
from jupyter_gpuburst.hub.kernels.handlers import REFUSED_REASON
from jupyter_gpuburst.hub.service import log_request


def handler(status: int, reason: str) -> SimpleNamespace:
    request = SimpleNamespace(method="POST", path="/services/gpuburst/api/kernels", remote_ip="127.0.0.1", request_time=lambda: 0.01)
    return SimpleNamespace(get_status=lambda: status, _reason=reason, request=request)


@pytest.mark.parametrize(
    ("status", "reason", "level"),
    [
        (503, REFUSED_REASON, logging.WARNING),  # no GPU free: the hub working as meant
        (500, REFUSED_REASON, logging.ERROR),  # a pod the hub could not create
        (503, "Service Unavailable", logging.ERROR),
        (409, "Conflict", logging.WARNING),
        (200, "OK", logging.DEBUG),
    ],
)
def test_a_refused_gpu_kernel_is_a_warning_not_an_error(monkeypatch, status, reason, level):
    # the logger itself, not caplog: a hub started earlier in this process may stop propagation
    logged: list[tuple[int, str]] = []
    monkeypatch.setattr(service.access_log, "log", lambda lvl, msg, *args: logged.append((lvl, msg % args)))
    log_request(handler(status, reason))
    [(levelno, message)] = logged
    assert levelno == level and message.startswith(f"{status} POST /services/gpuburst/api/kernels")
