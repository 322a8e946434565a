"""The kubelet's API of a site's nodes: what kube-apiserver forwards ``pods/exec`` and ``pods/log`` to.

On a real control plane these subresources are not the API server's own: it finds the pod's node,
dials the address its kubelet reports (``status.addresses``, ``daemonEndpoints.kubeletEndpoint``)
with its kubelet client certificate, and relays ``/exec/{namespace}/{pod}/{container}`` and
``/containerLogs/{namespace}/{pod}/{container}``. One server answers for every node of a site,
our process kubelet's and Liqo's virtual nodes alike (a virtual kubelet forwards to the donor's
pod), on one port, as each node reports it.

- **Where:** on every address (the nodes' InternalIPs are loopback addresses of their own), as a
  kubelet's port is, so what guards it is who may call.
- **Who may call:** TLS with a client certificate from the site's CA, and only kube-apiserver's
  kubelet client identity (``KUBELET_CLIENT_USER``); a real kubelet asks the API server
  (SubjectAccessReview on ``nodes/proxy``) instead, which grants that identity the same.
- **Serving certificate:** the kubelet's own, which kube-apiserver does not verify unless it is
  given ``--kubelet-certificate-authority`` (kubeadm does not give it: kubelets serve
  self-signed certificates by default).
- **Protocols:** exec over WebSocket (``v4.channel.k8s.io``: kubernetes_asyncio, so the hub and
  KubeSpawner), which kube-apiserver passes through to the kubelet as it came, and over SPDY
  (spdyexec.py), into which kube-apiserver 1.35 translates a client's ``v5.channel.k8s.io``
  (kubectl 1.30+, the ``kubernetes`` client).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from jupyter_gpuburst.sim.cluster import NodeKubelet
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube import spdyexec
from jupyter_gpuburst.sim.kube.controlplane import KUBELET_CLIENT_USER
from jupyter_gpuburst.sim.kubelet import exec as exec_stream
from jupyter_gpuburst.sim.podlog import serve_log

log = logging.getLogger(__name__)
# (namespace, pod) -> the kubelet that runs it: ours, or the virtual kubelet of its node
KubeletOf = Callable[[str, str], NodeKubelet]


def client_user(request: web.Request) -> str | None:
    """The common name of the verified client certificate of ``request``, if any."""
    peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class KubeletApi:
    """The HTTPS server of a site's kubelets, on ``host``:``port`` (0: a free one)."""

    def __init__(self, store, kubelet_of: KubeletOf, ca: Path, serving: tuple[Path, Path], host: str = "0.0.0.0", port: int = 0):
        self.store = store
        self.kubelet_of = kubelet_of
        self.host = host
        self.port = port
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
        self._tls.verify_mode = ssl.CERT_REQUIRED
        self._tls.load_cert_chain(str(serving[0]), str(serving[1]))
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._only_the_api_server])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        app.router.add_route("*", "/exec/{namespace}/{pod}/{container}", self._exec)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._tls)
        await site.start()
        if not self.port:
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _only_the_api_server(self, request: web.Request, handler) -> web.StreamResponse:
        user = client_user(request)
        if user != KUBELET_CLIENT_USER:
            log.info("kubelet API: %s %s refused to %r", request.method, request.path, user)
            return web.Response(
                status=403, text=f"Forbidden (user={user}, verb={request.method.lower()}, resource=nodes, subresource=proxy)"
            )
        try:
            return await handler(request)
        except ApiError as exc:
            # before the upgrade, as a kubelet answers: the API server relays it to the client
            return web.Response(status=exc.code, text=exc.message)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        kubelet = self.kubelet_of(ns, pod)
        return await serve_log(request, self.store, kubelet.log_path, ns, pod, container)

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        kubelet = self.kubelet_of(ns, pod)
        if request.headers.get("Upgrade", "").lower() != "spdy/3.1":
            return await exec_stream.serve(request, ns, pod, kubelet.open_exec, container=container, flags=exec_stream.KUBELET_FLAGS)
        protocol = spdyexec.negotiate(request)
        if protocol is None:
            return web.Response(status=400, text=f"no protocol in common: this kubelet speaks {', '.join(spdyexec.PROTOCOLS)} over SPDY")
        stdin, stdout, stderr, tty = (exec_stream.asked(request, n) for n in exec_stream.KUBELET_FLAGS)
        command = request.query.getall("command", [])
        # errors (no such container, not running, unknown command) are answered before the upgrade
        opened = await kubelet.open_exec(ns, pod, container, command, stdin=stdin, tty=tty)
        wanted = {"stdin": stdin, "stdout": stdout, "stderr": stderr and not tty, "resize": tty}
        return await spdyexec.serve(request, opened, protocol, wanted, command)
