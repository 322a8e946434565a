"""A stand-in GPU kernel for the rush benchmark only: answers the Jupyter messaging protocol over ZMQ.

Five hundred ipykernels (and as many JupyterLabs) do not fit a 2-core machine; this does (pyzmq
and the standard library, a few MB each). It binds the five ports of the connection the hub put
in the pod's Secret, echoes heartbeats, and answers ``kernel_info_request`` and
``execute_request`` on shell and control, signed with the connection's key as a kernel must
(a client drops an unsigned or wrongly signed reply), with ``busy``/``idle`` on iopub around
each. It runs no code: what is timed is everything up to a cell's reply, the hub's placement,
the pod's start (image pull included) and the round trip to the kernel.

As a warm pool's pre-started kernel (``c.WarmPools.kernels``) it waits as the real entry point
does (``kernel/pod.py``, whose functions it calls): Ready on its heartbeat port, no key, nothing
bound, until the hub writes the adopter's connection into its Secret volume; then it binds the
pod's own address with the adopter's new key. Only ipykernel's import is left out.
"""

import datetime
import hashlib
import hmac
import json
import os
import signal
import sys
import uuid

import zmq

from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_DIR_ENV as CONNECTION_DIR_ENV
from jupyter_gpuburst.core.keys import KERNEL_CONNECTION_ENV as CONNECTION_ENV
from jupyter_gpuburst.kernel.pod import hold_ready_port, wait_for_adoption

DELIM = b"<IDS|MSG>"


def connection_from_env(environ: dict[str, str]) -> dict:
    """The connection a cold kernel pod gets in its env, or, pre-started, the one its adopter
    sends (waited for as ``kernel/pod.py`` waits: Ready meanwhile, nothing bound)."""
    if CONNECTION_ENV in environ or not environ.get(CONNECTION_DIR_ENV):
        return json.loads(environ.pop(CONNECTION_ENV))
    ready = hold_ready_port(environ)
    print("Pre-started stand-in kernel ready: waiting for its connection", flush=True)
    raw = wait_for_adoption(environ)
    if ready is not None:
        ready.close()  # the heartbeat socket takes the port (and the probe) next
    print(f"Adopted by {environ.get('JUPYTERHUB_USER', '?')}", flush=True)
    return json.loads(raw)


def main() -> int:
    connection = connection_from_env(os.environ)  # type: ignore[arg-type]
    key = connection["key"].encode()
    session = uuid.uuid4().hex
    context = zmq.Context()

    def bind(kind: int, port_name: str) -> zmq.Socket:
        socket = context.socket(kind)
        socket.bind(f"tcp://{connection['ip']}:{connection[port_name]}")
        return socket

    shell, control = bind(zmq.ROUTER, "shell_port"), bind(zmq.ROUTER, "control_port")
    stdin, iopub, hb = bind(zmq.ROUTER, "stdin_port"), bind(zmq.PUB, "iopub_port"), bind(zmq.REP, "hb_port")
    del stdin  # bound so that a client's stdin channel connects; the stand-in never asks for input
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    count = 0

    def send(socket: zmq.Socket, idents: list[bytes], kind: str, content: dict, parent: dict) -> None:
        header = {
            "msg_id": uuid.uuid4().hex,
            "msg_type": kind,
            "session": session,
            "username": "kernel",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": "5.3",
        }
        parts = [json.dumps(p).encode() for p in (header, parent, {}, content)]
        signature = hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()
        socket.send_multipart([*idents, DELIM, signature, *parts])

    def answer(socket: zmq.Socket) -> None:
        nonlocal count
        frames = socket.recv_multipart()
        split = frames.index(DELIM)
        idents, signature, parts = frames[:split], frames[split + 1], frames[split + 2 : split + 6]
        if not hmac.compare_digest(signature, hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()):
            return  # as ipykernel does: an unsigned message is dropped
        parent = json.loads(parts[0])
        kind = parent["msg_type"]
        send(iopub, [], "status", {"execution_state": "busy"}, parent)
        if kind == "execute_request":
            count += 1
            send(iopub, [], "execute_input", {"code": json.loads(parts[3]).get("code", ""), "execution_count": count}, parent)
            send(socket, idents, "execute_reply", {"status": "ok", "execution_count": count, "user_expressions": {}, "payload": []}, parent)
        elif kind == "kernel_info_request":
            info = {
                "status": "ok",
                "protocol_version": "5.3",
                "implementation": "gpuburst-bench-standin",
                "implementation_version": "1",
                "language_info": {"name": "python", "version": sys.version.split()[0], "mimetype": "text/x-python"},
                "banner": "stand-in kernel",
            }
            send(socket, idents, "kernel_info_reply", info, parent)
        elif kind == "shutdown_request":
            send(socket, idents, "shutdown_reply", {"status": "ok", "restart": False}, parent)
            send(iopub, [], "status", {"execution_state": "idle"}, parent)
            raise SystemExit(0)
        send(iopub, [], "status", {"execution_state": "idle"}, parent)

    poller = zmq.Poller()
    for socket in (shell, control, hb):
        poller.register(socket, zmq.POLLIN)
    while True:
        # a timeout: a SIGTERM that a thread of ZMQ's takes leaves an endless poll uninterrupted,
        # and Python runs the handler only once the main thread is back in Python code
        for socket, _ in poller.poll(1000):
            if socket is hb:
                hb.send(hb.recv())
            else:
                answer(socket)


if __name__ == "__main__":
    sys.exit(main())
