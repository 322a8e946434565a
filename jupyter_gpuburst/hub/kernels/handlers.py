"""The hub's GPU kernel API: a user's server asks here for a GPU kernel, with its own token.

``/hub/api/gpuburst/kernels``: ``GET`` the caller's kernels and the profiles offered,
``POST`` a new one. ``/hub/api/gpuburst/kernels/<id>``: ``GET`` (``?wait=<s>`` waits while it
starts) and ``DELETE``. All need the custom scope ``custom:gpuburst:kernels`` (held by the user
and granted to the server's token); a user only ever sees their own kernels, and another
user's kernel answers 404 like one that does not exist. The connection key comes in with the
POST and never goes out again.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import Scope
from tornado import web

from jupyter_gpuburst.hub.kernels.registry import KernelError, KernelRecord, KernelRegistry, record_json

SCOPE = "custom:gpuburst:kernels"
SCOPE_DESCRIPTION = "Start, list and stop your own GPU kernels (remote GPU kernels placed by jupyter-gpuburst)."
API_PATH = r"/api/gpuburst/kernels"
MAX_WAIT_S = 30.0


class KernelAPIHandler(APIHandler):
    def initialize(self, registry_source: Any = None) -> None:
        from jupyter_gpuburst.hub.kernels.service import default_registry

        self.registry_source = registry_source or default_registry

    def check_kernel_scope(self) -> Any:
        """The calling user, when they and their token hold the kernel scope."""
        user = self.current_user
        if user is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        if getattr(user, "kind", "user") != "user":
            raise web.HTTPError(403, "GPU kernels belong to users; services cannot start them")
        filters = self.parsed_scopes.get(SCOPE)
        allowed = filters == Scope.ALL or (
            isinstance(filters, dict)
            and (
                user.name in filters.get("user", ())
                or any(g.name in filters.get("group", ()) for g in getattr(user, "groups", []) or [])
            )
        )
        if not allowed:
            self.log.warning("GPU kernel API: %s lacks scope %s", user.name, SCOPE)
            raise web.HTTPError(403, f"This server may not start GPU kernels (it needs the {SCOPE} scope; ask your admin).")
        return user

    async def registry(self) -> KernelRegistry:
        try:
            return await self.registry_source(self)
        except web.HTTPError:
            raise
        except Exception as exc:  # noqa: BLE001 - logged in full, reported in short
            self.log.exception("GPU kernels are unavailable")
            raise web.HTTPError(503, f"GPU kernels are unavailable now ({exc.__class__.__name__})") from None

    def get_json(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the request body must be JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the request body must be a JSON object")
        return body

    def kernel_error(self, exc: KernelError) -> web.HTTPError:
        return web.HTTPError(exc.status, "%s", exc.message, reason="GPU kernel refused" if exc.status >= 500 else None)

    def write_record(self, registry: KernelRegistry, record: KernelRecord) -> None:
        self.write(json.dumps(record_json(registry, record)))


class KernelsHandler(KernelAPIHandler):
    """``GET``: the caller's kernels and the GPU kernel profiles; ``POST``: start one."""

    async def get(self) -> None:
        user = self.check_kernel_scope()
        registry = await self.registry()
        server = self.get_argument("server", None)
        kernels = [record_json(registry, r) for r in registry.list(user.name, server)]
        profiles = [p.public() for p in registry.profiles.values()]
        self.write(json.dumps({"profiles": profiles, "kernels": kernels}))

    async def post(self) -> None:
        user = self.check_kernel_scope()
        body = self.get_json()
        unknown = set(body) - {"profile", "key", "signature_scheme", "kernel_id", "server_name", "notebook_dir", "prefer_site"}
        if unknown:
            raise web.HTTPError(400, f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
        server_name = body.get("server_name", "")
        if not isinstance(server_name, str):
            raise web.HTTPError(400, "server_name must be a string")
        spawner = user.orm_spawners.get(server_name) and user.spawners[server_name]
        if spawner is None or not spawner.active:
            raise web.HTTPError(409, f"the server {server_name!r} of {user.name} is not running")
        registry = await self.registry()
        server_pod = await _server_pod(registry, spawner)
        groups = frozenset(g.name for g in getattr(user, "groups", []) or [])
        try:
            record = await registry.start(
                user=user.name,
                groups=groups,
                server_name=server_name,
                server_pod=server_pod,
                profile_slug=body.get("profile"),
                key=body.get("key"),
                signature_scheme=body.get("signature_scheme", "hmac-sha256"),
                kernel_id=body.get("kernel_id", ""),
                notebook_dir=body.get("notebook_dir", ""),
                prefer_site=body.get("prefer_site"),
            )
        except KernelError as exc:
            raise self.kernel_error(exc) from None
        self.set_status(202)
        self.write_record(registry, record)


class KernelHandler(KernelAPIHandler):
    """One kernel: ``GET`` (``?wait=`` seconds while it starts) and ``DELETE``."""

    async def get(self, record_id: str) -> None:
        user = self.check_kernel_scope()
        registry = await self.registry()
        try:
            record = registry.get(user.name, record_id)
        except KernelError as exc:
            raise self.kernel_error(exc) from None
        try:
            wait = min(MAX_WAIT_S, max(0.0, float(self.get_argument("wait", "0"))))
        except ValueError:
            raise web.HTTPError(400, "wait must be a number of seconds") from None
        if wait:
            await registry.wait(record, wait)
        self.write_record(registry, record)

    async def delete(self, record_id: str) -> None:
        user = self.check_kernel_scope()
        registry = await self.registry()
        try:
            record = registry.get(user.name, record_id)
        except KernelError as exc:
            raise self.kernel_error(exc) from None
        await registry.stop(record)
        self.set_status(204)


async def _server_pod(registry: KernelRegistry, spawner: Any) -> dict[str, Any] | None:
    """The server's pod (kernel pods are owned by it, and a files policy reads its volumes);
    None when the server is not a pod."""
    name, namespace = getattr(spawner, "pod_name", None), getattr(spawner, "namespace", None)
    if not name or not namespace:
        return None
    try:
        pod = await registry.api.read_namespaced_pod(name, namespace)
    except Exception:  # noqa: BLE001 - no owner: the reaper still stops the kernel with its server
        registry.log.warning("GPU kernels: cannot read the server pod %s/%s", namespace, name)
        return None
    # the whole pod: a files policy may mount the same volumes (claims) as the server
    return registry.api.api_client.sanitize_for_serialization(pod)


def handlers(registry_source: Any = None) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"registry_source": registry_source}
    return [
        (API_PATH, KernelsHandler, kwargs),
        (API_PATH + r"/([0-9a-f]{1,32})", KernelHandler, kwargs),
    ]
