"""`GET /api/status` at a steady rate, from a process of its own, for `gpuburst bench telemetry`.

The latency a client sees must not include the load generator's own work: in the benchmark's
process, 50 stream clients share one event loop, and a status response that arrives while that
loop is reading samples or opening connections waits there, which the server never caused. So
the status requests come from here, over one keep-alive connection, with nothing else to do.

Each call is timed twice. ``seconds`` is what the probe saw: from just before the request is
sent until the probe has read the whole response. ``wire_seconds`` ends instead when the
response's last bytes reached the probe's socket, by the kernel's receive timestamp
(``SO_TIMESTAMPNS``): on a machine where the probe shares a CPU with the stream clients, a
response can arrive while a client runs and wait for the probe to be scheduled, which the
server never caused either; the wire time leaves that wait out. It is ``None`` where the kernel
gives no such timestamp; where it does, the probe's untimed first calls wait until it has begun to.

It calls for the whole of a run, without pause, so that the server's load is the same in every
phase and between them; the benchmark keeps the calls that started inside its phases' blocks
(their times on ``time.monotonic()``, on Linux one clock for every process).

Run as ``python -m jupyter_gpuburst.bench.status_probe`` with a JSON object on standard input
(the token stays out of the process list): ``url``, ``token``, ``rate`` (requests per second)
and ``until`` (a ``time.monotonic()`` value; the last moment it may call). It stops earlier on
SIGTERM. Prints one JSON list, a ``[started, seconds, wire_seconds]`` triple per request, in
order: when it was sent, on that clock, and the two durations.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
import threading
import time
from urllib.parse import urlsplit

# Linux's socket option for receive timestamps as a struct timespec (asm-generic value, which
# x86-64 and arm64 use); Python's socket module does not name it
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")  # the 64-bit layout; a 32-bit build gets no timestamps
WIRE_STAMPS = sys.platform.startswith("linux") and struct.calcsize("@l") == 8
ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if WIRE_STAMPS else 0


class ProbeError(RuntimeError):
    pass


class Connection:
    """One keep-alive HTTP/1.1 connection that sends GETs and reads responses with a
    ``Content-Length``, noting when the last bytes of each reached the socket."""

    def __init__(self, url: str, token: str):
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port or 80))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stamps = WIRE_STAMPS
        if self.stamps:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.stamps = False
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.request = (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: token {token}\r\nAccept: application/json\r\n\r\n"
        ).encode()
        self.buffer = b""

    def get(self) -> int | None:
        """Send one request and read its response; the realtime nanoseconds at which its last
        bytes arrived, or None without timestamps."""
        self.sock.sendall(self.request)
        stamp = None
        while b"\r\n\r\n" not in self.buffer:
            stamp = self._recv(stamp)
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        if len(status) < 2 or status[1] != "200":
            raise ProbeError(f"the server answered {lines[0]!r}")
        length = next((int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), None)
        if length is None:
            raise ProbeError("the response has no Content-Length")
        self.buffer = rest
        while len(self.buffer) < length:
            stamp = self._recv(stamp)
        self.buffer = self.buffer[length:]
        return stamp

    def _recv(self, stamp: int | None) -> int | None:
        data, ancillary, _, _ = self.sock.recvmsg(65536, ANCILLARY_BYTES if self.stamps else 0)
        if not data:
            raise ProbeError("the server closed the connection")
        self.buffer += data
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                stamp = seconds * 1_000_000_000 + nanoseconds
        return stamp

    def close(self) -> None:
        self.sock.close()


_stop = threading.Event()  # set by SIGTERM: the benchmark's run is over
# untimed calls, after the connection's first, while the kernel does not stamp yet; back to back,
# so this many take well under a second (loaded, the deferred work lands within the first few)
WARM_UP_CALLS = 100


def probe(url: str, token: str, rate: float, until: float) -> list[tuple[float, float, float | None]]:
    out: list[tuple[float, float, float | None]] = []
    interval = 1.0 / rate
    connection = Connection(url, token)
    try:
        stamped = connection.get()  # the server's first answer on this connection is not timed
        # Linux stamps received packets only once timestamping is on system-wide, which the
        # first socket to ask switches on in deferred work (net_enable_timestamp, net/core/dev.c):
        # responses before it go unstamped. Untimed calls until one is stamped, at most
        # WARM_UP_CALLS: a kernel that never stamps must not leave the probe warming up for good.
        for _ in range(WARM_UP_CALLS):
            if not connection.stamps or stamped is not None or _stop.is_set() or time.monotonic() >= until:
                break
            stamped = connection.get()
        nxt = time.monotonic()
        while not _stop.is_set() and time.monotonic() < until:
            # this order makes the wire time never longer than the probe's own: read the other
            # way round, a preemption between the two reads counted in the wire time only, and
            # the call lost its wire time as if the realtime clock had been stepped
            started = time.monotonic()
            sent_ns = time.time_ns()
            arrived_ns = connection.get()
            seconds = time.monotonic() - started
            wire = None
            if arrived_ns is not None:
                wire = (arrived_ns - sent_ns) / 1e9
                # the realtime clock was stepped in between: no wire time for this call
                if not 0 <= wire <= seconds + 0.001:
                    wire = None
            out.append((started, seconds, None if wire is None else min(wire, seconds)))
            # behind (a preempted probe), it goes on at its rate from now, not in a burst of the
            # calls it missed: a burst put more calls into a benchmark's block than its seconds
            # at the rate (71 where 62 fit, in a fresh clone's telemetry test)
            nxt = max(nxt + interval, time.monotonic())
            time.sleep(max(0.0, nxt - time.monotonic()))
    finally:
        connection.close()
    return out


def main() -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: _stop.set())
    options = json.loads(sys.stdin.read())
    try:
        latencies = probe(options["url"], options["token"], float(options["rate"]), float(options["until"]))
    except (OSError, ProbeError) as e:
        print(f"status probe: {e}", file=sys.stderr)
        return 1
    print(json.dumps(latencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
