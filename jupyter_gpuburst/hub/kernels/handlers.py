"""The GPU kernel API of the ``gpuburst`` service: a user's server asks here for a GPU kernel.

Served by the service's HTTP server in the hub process (``jupyter_gpuburst.hub.service``), so it
places from the spawner's own ledger. URLs, under the service's prefix ``/services/gpuburst/``:

- ``api/kernels``: ``GET`` the caller's kernels and the profiles offered; ``POST`` a new one
- ``api/kernels/<id>``: ``GET`` (``?wait=<s>`` waits while it starts, ``&seen=<version>``
  returns at once if it changed since that version) and ``DELETE``

The caller is a user's server with its own token (``Authorization: token ...``), checked with the
hub (``HubAuth``). The token must carry ``access:services!service=gpuburst`` (it may reach this
service) and the custom scope ``custom:gpuburst:kernels`` for its user; a token only carries
scopes its owner holds, so the admin grants both per group. A user only ever sees their own
kernels, and another user's kernel answers 404 like one that does not exist. A server's own
token (readable by whoever the server is shared with) sees its own server's kernels only
(``hub.tokenapi``). The connection key comes in with the POST and never goes out again.
"""

from __future__ import annotations

import json
import time
from typing import Any

from jupyterhub.services.auth import check_scopes
from tornado import web

from jupyter_gpuburst.core.placement import GPURequest
from jupyter_gpuburst.hub.accounting.gate import budget_refusal, budget_state
from jupyter_gpuburst.hub.accounting.rightsizing import Offer, suggestion_for
from jupyter_gpuburst.hub.kernels.registry import KernelError, KernelRecord, KernelRegistry, Refused
from jupyter_gpuburst.hub.kernels.service import LiveHub, default_registry
from jupyter_gpuburst.hub.kernels.settings import KernelProfile
from jupyter_gpuburst.hub.queue import classes as lab_classes
from jupyter_gpuburst.hub.tokenapi import UserTokenHandler

SCOPE = "custom:gpuburst:kernels"
SCOPE_DESCRIPTION = "Start, list and stop your own GPU kernels (remote GPU kernels placed by jupyter-gpuburst)."
# relative to the service's prefix
API_PATH = "api/kernels"
MAX_WAIT_S = 30.0


def access_scope(service_name: str) -> str:
    return f"access:services!service={service_name}"


# the HTTP reason phrase of a start the hub refuses (a full federation is 503 with it)
REFUSED_REASON = "GPU kernel refused"


class KernelAPIHandler(UserTokenHandler):
    """``self.user`` is the calling user's model; ``self.token_server`` the server whose own
    token called, if it is one."""

    token_server: str | None = None

    def initialize(self, registry_source: Any = None, hub: Any = None) -> None:
        self.hub = hub or LiveHub()
        self.registry_source = registry_source or default_registry

    def authorize(self, model: dict[str, Any]) -> None:
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "GPU kernels belong to users; services cannot start them")
        have = set(model.get("scopes") or ())
        needed = [access_scope(self.service.name), f"{SCOPE}!user={model['name']}"]
        missing = [scope for scope in needed if not check_scopes({scope}, have)]
        if missing:
            # expected for users the admin gave no GPU kernels: their servers ask once, at start
            self.log.info("GPU kernel API: a token of %s lacks %s", model["name"], ", ".join(missing))
            raise web.HTTPError(403, f"This server may not start GPU kernels (its token needs {' and '.join(missing)}; ask your admin).")
        # a server's own token speaks for that server only (the server's code, and whoever
        # the server is shared with, can read it)
        self.resolve_token_server(self.hub, model["name"])

    def offered(self, registry: KernelRegistry, server_name: str | None) -> frozenset[str] | None:
        """The GPU kernel profiles ``server_name`` offers (None: all), as its profile says."""
        if server_name is None or not registry.settings.server_profiles:
            return None
        server_profile = getattr(self.hub, "server_profile", None)
        return registry.settings.offered_by(server_profile(self.user["name"], server_name) if server_profile else None)

    @property
    def log(self) -> Any:
        return self.hub.log

    async def registry(self) -> KernelRegistry:
        try:
            return await self.registry_source(self.hub)
        except web.HTTPError:
            raise
        except Exception as exc:  # noqa: BLE001 - logged in full, reported in short
            self.log.exception("GPU kernels are unavailable")
            raise web.HTTPError(503, f"GPU kernels are unavailable now ({exc.__class__.__name__})") from None

    def get_json(self) -> dict[str, Any]:
        try:
            body = json.loads(self.body_bytes() or b"{}")
        except (ValueError, RecursionError):  # nested past Python's depth: malformed too
            raise web.HTTPError(400, "the request body must be JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the request body must be a JSON object")
        return body

    def kernel_error(self, exc: KernelError) -> web.HTTPError:
        refused = exc.status >= 500 or isinstance(exc, Refused)
        return web.HTTPError(exc.status, "%s", exc.message, reason=REFUSED_REASON if refused else None)

    def own_record(self, registry: KernelRegistry, record_id: str) -> KernelRecord:
        """The caller's kernel; one of another of the user's servers reads as missing to a
        server's token, as another user's does."""
        try:
            record = registry.get(self.user["name"], record_id)
        except KernelError as exc:
            raise self.kernel_error(exc) from None
        if self.token_server is not None and record.server_name != self.token_server:
            raise web.HTTPError(404, "%s", f"no GPU kernel {record_id!r}")
        return record

    def is_admin(self) -> bool:
        # the hub's own record: a server's token does not show its owner's adminship
        return self.hub.is_admin(self.user["name"])

    def write_record(self, registry: KernelRegistry, record: KernelRecord) -> None:
        self.write(json.dumps(record_json(registry, record)))


class KernelsHandler(KernelAPIHandler):
    """``GET``: the caller's kernels, the GPU kernel profiles and what is free now; ``POST``: start one."""

    async def get(self) -> None:
        registry = await self.registry()
        server = self.get_argument("server", None)
        if self.token_server is not None:
            if server is not None:
                self.check_server(server)
            server = self.token_server
        kernels = [record_json(registry, r) for r in registry.list(self.user["name"], server)]
        groups = self.hub.groups(self.user["name"])
        offered = self.offered(registry, server)
        offers = [p for p in registry.profiles.values() if offered is None or p.slug in offered]
        profiles = [{**p.public(), "available": registry.availability(p, self.user["name"], groups)} for p in offers]
        # what is left of the user's GPU-hour budget, as the spawn form says it ("" without one);
        # used up, the launcher's cards say so rather than fail on a click
        budget, used_up = budget_state(registry.tracker, self.user["name"], groups, self.is_admin())
        # the smallest GPU kernel the user's past GPU sessions would have fitted ("" if none)
        suggestion = suggestion_for(
            registry.tracker,
            self.user["name"],
            [Offer(p.slug, p.display_name, p.resource, p.count) for p in offers],
        )
        self.write(
            json.dumps(
                {
                    "profiles": profiles,
                    "kernels": kernels,
                    "budget": budget,
                    "budget_used_up": used_up,
                    "suggestion": suggestion,
                    # GPUs a lab on now holds from this user, as the spawn form says it ("" if none)
                    "held": held_for_labs(offers, self.user["name"], groups),
                    # with none free, whether a start waits in line or is refused (the launcher says which)
                    "queue_when_full": registry.settings.queue_when_full,
                }
            )
        )

    async def post(self) -> None:
        body = self.get_json()
        unknown = set(body) - {"profile", "key", "signature_scheme", "kernel_id", "server_name", "notebook_dir", "prefer_site", "port_set"}
        if unknown:
            raise web.HTTPError(400, f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
        # "prefer_site" is accepted from servers of earlier versions and ignored: where a
        # restarted kernel goes is the hub's record's to say, never the server's
        server_name = body.get("server_name", "")
        if not isinstance(server_name, str):
            raise web.HTTPError(400, "server_name must be a string")
        name = self.user["name"]
        self.check_server(server_name)
        spawner = self.hub.active_spawner(name, server_name)
        if spawner is None:
            raise web.HTTPError(409, f"the server {server_name!r} of {name} is not running")
        # the culler's word, where the service has one (hub.culling): the kernels know no culler
        refuses_start = self.settings.get("kernel_start_refusal")
        refused = refuses_start(name, server_name, body.get("kernel_id")) if refuses_start else None
        if refused:
            # the culler stopped it and its server has not heard yet: a restarter's restart
            raise web.HTTPError(409, "%s", refused)
        registry = await self.registry()
        offered = self.offered(registry, server_name)
        if offered is not None and body.get("profile") not in offered:
            raise web.HTTPError(403, "This server's profile offers no such GPU kernel; start a server whose profile offers GPU kernels.")
        groups = self.hub.groups(name)
        admin = self.is_admin()
        server_pod = await _server_pod(registry, spawner)
        # a kernel-mode lab's report times each student from here to their first GPU cell
        asked = time.time()
        try:
            record = await registry.start(
                user=name,
                groups=groups,
                server_name=server_name,
                server_pod=server_pod,
                profile_slug=body.get("profile"),
                key=body.get("key"),
                signature_scheme=body.get("signature_scheme", "hmac-sha256"),
                kernel_id=body.get("kernel_id", ""),
                notebook_dir=body.get("notebook_dir", ""),
                port_set=body.get("port_set", 0),
                # asked with the start's record made in one step, and again when a queued one is placed
                refusal=lambda: budget_refusal(registry.tracker, name, groups, admin),
            )
        except KernelError as exc:
            slug = body.get("profile")
            profile = registry.profiles.get(slug) if isinstance(slug, str) else None
            if exc.status >= 500 and profile is not None:  # no GPU to be had now: the student still waits for one
                lab_classes.note_kernel_asked(name, groups, profile.resource, asked)
            raise self.kernel_error(exc) from None
        lab_classes.note_kernel_asked(name, groups, record.profile.resource, asked)
        self.set_status(202)
        self.write_record(registry, record)


class KernelHandler(KernelAPIHandler):
    """One kernel: ``GET`` (``?wait=`` seconds while it starts) and ``DELETE``."""

    async def get(self, record_id: str) -> None:
        registry = await self.registry()
        record = self.own_record(registry, record_id)
        try:
            wait = min(MAX_WAIT_S, max(0.0, float(self.get_argument("wait", "0"))))
            seen = self.get_argument("seen", None)
            seen = int(seen) if seen is not None else record.version
        except ValueError:
            raise web.HTTPError(400, "wait must be a number of seconds, seen the version last read") from None
        # a change since the caller's last read (its place in line, set after the start was
        # answered) is news now, not after the next change or the whole wait
        if wait and seen == record.version:
            await registry.wait(record, wait)
        self.write_record(registry, record)

    async def delete(self, record_id: str) -> None:
        registry = await self.registry()
        record = self.own_record(registry, record_id)
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


def handlers(prefix: str, registry_source: Any = None, hub: Any = None) -> list[tuple[str, type, dict[str, Any]]]:
    """Routes under the service's ``prefix`` (e.g. ``/services/gpuburst/``)."""
    kwargs = {"registry_source": registry_source, "hub": hub}
    return [
        (rf"{prefix}{API_PATH}/?", KernelsHandler, kwargs),
        (rf"{prefix}{API_PATH}/([0-9a-f]{{1,32}})", KernelHandler, kwargs),
    ]


def held_for_labs(profiles: list[KernelProfile], user: str, groups: frozenset[str]) -> str:
    """The lab bookings' sentences on what labs of classes ``user`` is not in hold now of the
    GPUs of ``profiles`` ("4 GPUs are held for the lab ML-101 until 10:30."), each once: profiles
    of one resource meet the same hold."""
    sentences: list[str] = []
    for profile in profiles:
        hold = lab_classes.hold_for(GPURequest(profile.resource, profile.count, user, groups, profile.slug, profile.allowed_sites))
        if hold is not None and hold.sentence not in sentences:
            sentences.append(hold.sentence)
    return " ".join(sentences)


def record_json(registry: KernelRegistry, record: KernelRecord) -> dict[str, Any]:
    """What the API shows about a kernel: placement and address, never its key."""
    placement = record.placement
    state = registry.state(record)
    out: dict[str, Any] = {
        "id": record.id,
        "kernel_id": record.kernel_id,
        "server_name": record.server_name,
        "profile": record.profile.slug,
        "display_name": record.profile.display_name,
        "state": state,
        "error": record.error or None,
        "site": placement.site if placement else None,
        "site_kind": (("donor" if placement.is_donor else "origin") if placement else None),
        "cluster_id": placement.cluster_id if placement else None,
        "node": registry.node(record),
        "resource": placement.resource if placement else None,
        "count": placement.count if placement else None,
        "reason": placement.reason if placement else None,
        "waiting": registry.waiting(record),
        # while it waits in the hub's queue: {position, seconds, basis, text}
        "queue": record.line.as_dict() if record.line is not None else None,
        "relocated_from": record.relocated_from or None,
        "files": record.files,
        "attempts": len(record.attempts) + 1,
        # the fast path: a pre-started kernel of a warm pool was adopted
        "prestarted": record.prestarted,
        "pod": record.pod_name,
        # what a long-poll names as ``seen`` to hear of any later change
        "version": record.version,
    }
    if state == "running":
        out["connection"] = {"transport": "tcp", "ip": registry.pod_ip(record), **record.ports}
    return out
