"""The activity API of the ``gpuburst`` service: a user's server reports when its GPUs were last
busy, and hears back what the culler plans for it; the student's Keep comes in here too.

URLs, under the service's prefix ``/services/gpuburst/``:

- ``api/activity``: ``POST`` a report (see ``jupyter_gpuburst.hub.culling.store``); the reply is
  the culling state of the server and its GPU kernels, and whether the hub keeps what their GPUs
  use (``measure_use``: the report's ``use`` goes to the GPU-hours ledger)
- ``api/activity/keep``: ``POST {"server_name", "target"}``: Keep one server or GPU kernel

A report is accepted only with a token carrying ``users:activity!user=<its owner>``: the scope
JupyterHub gives every server's own token to post its activity to ``/hub/api/users/<name>/activity``.
A report is always about the token's owner, so another user's token can only ever speak for
that other user; a server's own token speaks (reports, Keep) for that server only, so whoever
the server is shared with cannot keep or get culled its owner's other servers and kernels; a
kernel that is not one of the reporting server's GPU kernels is ignored and logged.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import check_scopes
from tornado import web

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.culling.culler import held_resource
from jupyter_gpuburst.hub.culling.store import SERVER, ReportError
from jupyter_gpuburst.hub.queue import classes as lab_classes
from jupyter_gpuburst.hub.tokenapi import UserTokenHandler


class ActivityAPIHandler(UserTokenHandler):
    # a report names a server's GPUs and kernels: a few KiB
    max_body_bytes = 256 * 1024

    def initialize(self, culler_source: Any) -> None:
        self.culler_source = culler_source

    def authorize(self, model: dict[str, Any]) -> None:
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "Missing or invalid credentials.")
        scope = f"users:activity!user={model['name']}"
        if not check_scopes({scope}, set(model.get("scopes") or ())):
            self.culler.log.warning("GPU activity: a token of %s without %s was refused", model["name"], scope)
            raise web.HTTPError(403, f"This token may not report activity (it needs {scope}).")
        self.resolve_token_server(self.culler.hub, model["name"])

    @property
    def culler(self) -> Any:
        return self.culler_source()

    def body(self) -> Any:
        try:
            return json.loads(self.body_bytes() or b"{}")
        except (ValueError, RecursionError):  # nested past Python's depth: malformed too
            raise web.HTTPError(400, "the request body must be JSON") from None


class ActivityHandler(ActivityAPIHandler):
    async def post(self) -> None:
        culler = self.culler
        name = self.user["name"]
        body = self.body()
        server_name = body.get("server_name", "") if isinstance(body, dict) else ""
        if isinstance(server_name, str):
            self.check_server(server_name)
        if isinstance(server_name, str) and culler.hub.active_spawner(name, server_name) is None:
            raise web.HTTPError(409, f"the server {server_name!r} of {name} is not running")
        registry = await culler.registry()

        def owns(record_id: str, server: str) -> bool:
            record = culler.kernel_record(registry, name, record_id)
            return record is not None and record.server_name == server

        sink = self.settings.get("gpu_use_sink")

        def used(server: str, target: str, figures: dict[str, Any]) -> None:
            # what its GPUs used, for the GPU-hours ledger's right-sizing (the service wires it)
            if sink is not None:
                sink(name, server, target, figures)

        def first_cell(server: str, target: str, began: float) -> None:
            # for a lab's report (hub/labs): a first GPU cell, on the hub's clock, of one of the
            # token owner's own GPU servers (server mode) or GPU kernels (kernel mode)
            if target == SERVER:
                resource = held_resource(culler.hub.active_spawner(name, server))
                if resource is not None:
                    lab_classes.note_server_first_cell(name, resource, began)
                return
            record = culler.kernel_record(registry, name, target)
            if record is not None:
                lab_classes.note_first_cell(name, record.profile.resource, began)

        try:
            server_name, ignored = culler.store.report(name, body, owns, on_use=used, on_first_cell=first_cell)
        except ReportError as exc:
            culler.log.warning("GPU activity: a report of %s was refused: %s", name, exc.message)
            raise web.HTTPError(exc.status, "%s", exc.message) from None
        if ignored:
            culler.log.warning(
                "GPU activity: %s's server %r reported kernels that are not its own: %s (ignored)",
                name,
                server_name,
                ", ".join(ignored[:5]),
            )
        reply = await culler.reply(name, server_name)
        reply["ignored"] = ignored
        # measure GPU use even where nothing is culled: the ledger keeps it for right-sizing
        wanted = self.settings.get("gpu_use_wanted")
        reply["measure_use"] = bool(wanted()) if wanted is not None else False
        self.write(json.dumps(reply))


class KeepHandler(ActivityAPIHandler):
    async def post(self) -> None:
        body = self.body()
        if not isinstance(body, dict) or not isinstance(body.get("server_name", ""), str) or not isinstance(body.get("target"), str):
            raise web.HTTPError(400, 'a keep is {"server_name": ..., "target": "server" or a GPU kernel\'s id}')
        self.check_server(body.get("server_name", ""))
        status, message = await self.culler.keep(self.user["name"], body.get("server_name", ""), body["target"])
        if status != 200:
            raise web.HTTPError(status, "%s", message)
        self.write(json.dumps({"message": message}))


def handlers(prefix: str, culler_source: Any) -> list[tuple[str, type, dict[str, Any]]]:
    kwargs = {"culler_source": culler_source}
    return [
        (rf"{prefix}{keys.ACTIVITY_API_PATH}/?", ActivityHandler, kwargs),
        (rf"{prefix}{keys.ACTIVITY_API_PATH}/keep", KeepHandler, kwargs),
    ]
