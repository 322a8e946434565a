"""A stand-in single-user server for the spawn benchmarks only: answers every HTTP request.

JupyterHub counts a server as up once its URL answers HTTP with any status below 500, and
tells the server where to listen in ``JUPYTERHUB_SERVICE_URL``. Two hundred real Jupyter
servers do not fit a small machine; this does (standard library only, run as ``python -I -S``:
a few MB each). It reports the hub version header so the hub does not warn about a mismatch.
"""

import os
import selectors
import signal
import socket
import sys
from urllib.parse import urlsplit

RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\nX-JupyterHub-Version: %s\r\nConnection: close\r\n\r\nstand-in"
)


def main() -> int:
    url = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:8888/"))
    version = os.environ.get("JUPYTERHUB_VERSION", "").encode() or b"unknown"
    response = RESPONSE % version
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((url.hostname or "127.0.0.1", url.port or 8888))
    server.listen(64)
    server.setblocking(False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is server:
                try:
                    conn, _addr = server.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            try:
                data = conn.recv(65536)
                if data:
                    conn.setblocking(True)
                    conn.sendall(response)
            except OSError:
                pass
            sel.unregister(conn)
            conn.close()


if __name__ == "__main__":
    sys.exit(main())
