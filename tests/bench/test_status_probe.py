"""The telemetry benchmark's status probe: one keep-alive connection, two timings per call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from jupyter_gpuburst.bench import status_probe

TOKEN = "probe-token"


class StatusHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as jupyter_server answers
    # the head and the body go out in two writes; with Nagle's algorithm the body waits for the
    # client's delayed ACK, about 40 ms a call, as tornado (which sets TCP_NODELAY) never does
    disable_nagle_algorithm = True
    seen: ClassVar[list[tuple[str, str | None, int]]] = []

    def do_GET(self) -> None:
        StatusHandler.seen.append((self.path, self.headers.get("Authorization"), id(self.connection)))
        if self.headers.get("Authorization") != f"token {TOKEN}":
            body, code = b'{"message": "Forbidden"}', 403
        else:
            body, code = json.dumps({"started": "now", "kernels": 0}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def url():
    StatusHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/status"
    server.shutdown()
    server.server_close()


def test_calls_at_its_rate_over_one_connection_with_both_timings(url):
    started = time.monotonic()
    calls = status_probe.probe(url, TOKEN, rate=100, until=started + 1.0)
    returned = time.monotonic()
    # it called until its time was up, however long each call took on a loaded machine...
    assert returned >= started + 1.0 and len(calls) >= 2
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[0][0] >= started
    # ...and never faster than its rate: its k-th call starts no sooner than k intervals after it
    # began (not after its first call, which a busy machine may delay while the next ones catch up)
    for k, (sent, _, _) in enumerate(calls):
        assert sent - started >= k * 0.01, f"call {k} came {sent - started:.4f} s after the probe began"
    for _, seconds, wire in calls:
        assert seconds > 0
        # where the kernel stamped the response, it reached the socket before the probe read it
        assert wire is None or 0 <= wire <= seconds
    if status_probe.WIRE_STAMPS:
        # a call lacks its wire time only where the kernel gave no usable stamp (the module says when)
        assert sum(wire is not None for _, _, wire in calls) >= len(calls) / 2
    # untimed first calls opened the connection every timed one reused, with the token
    assert len(StatusHandler.seen) > len(calls)
    assert {(path, auth) for path, auth, _ in StatusHandler.seen} == {("/api/status", f"token {TOKEN}")}
    assert len({connection for _, _, connection in StatusHandler.seen}) == 1


def test_a_kernel_that_never_stamps_costs_the_warm_up_and_no_timed_call(url, monkeypatch):
    """Where the socket takes the timestamp option but no response is ever stamped, the warm-up
    ends after its calls and every call is timed without a wire time."""
    monkeypatch.setattr(status_probe.Connection, "get", lambda self, get=status_probe.Connection.get: (get(self), None)[1])
    calls = status_probe.probe(url, TOKEN, rate=100, until=time.monotonic() + 2.0)
    assert len(calls) >= 2 and all(wire is None for _, _, wire in calls)
    untimed = len(StatusHandler.seen) - len(calls)
    assert untimed == (1 + status_probe.WARM_UP_CALLS if status_probe.WIRE_STAMPS else 1), untimed


def test_a_refused_call_is_an_error_not_a_timing(url):
    with pytest.raises(status_probe.ProbeError, match="403"):
        status_probe.probe(url, "wrong", rate=100, until=time.monotonic() + 0.2)


def test_the_process_stops_on_sigterm_and_prints_its_calls(url):
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpuburst.bench.status_probe"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdin.write(json.dumps({"url": url, "token": TOKEN, "rate": 50, "until": time.monotonic() + 600}))
    proc.stdin.close()
    deadline = time.monotonic() + 30
    # the first call and the warm-up's are not timed: past them, at least 5 timed calls (waiting
    # for 5 calls alone, a loaded machine whose kernel stamped late sent SIGTERM in the warm-up)
    while len(StatusHandler.seen) < 1 + status_probe.WARM_UP_CALLS + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.stdout.read(), proc.stderr.read()  # both end when it exits
    assert proc.wait(timeout=30) == 0, err
    calls = json.loads(out)
    assert len(calls) >= 4 and all(len(c) == 3 for c in calls)
    assert TOKEN not in out + err
