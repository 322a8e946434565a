"""Admin-only capacity API and page, served by the hub itself (``JupyterHub.extra_handlers``).

Authorization is JupyterHub's own: both need the ``admin:users`` scope (the report names users
and their servers); the page also needs ``admin-ui``, like the hub's admin page. The API takes
tokens; the page takes the login cookie.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from jupyter_gpuburst.core import names
from jupyter_gpuburst.hub import metrics
from jupyter_gpuburst.hub.report import CapacitySource, capacity_report

TrackerSource = Callable[[BaseHandler], "Awaitable[CapacitySource] | CapacitySource"]

API_PATH = r"/api/gpuburst/capacity"
PAGE_PATH = r"/gpuburst/capacity"
PAGE_TEMPLATE = "gpuburst_capacity.html"


async def default_tracker_source(handler: BaseHandler) -> CapacitySource:
    """The hub process's shared tracker, built from the hub's config (GPUBurstSpawner traits)."""
    from jupyter_gpuburst.hub.capacity import CapacityTracker

    return await CapacityTracker.ensure(handler.settings["config"], handler.log)


async def _tracker(handler: BaseHandler, source: TrackerSource) -> CapacitySource:
    try:
        tracker = source(handler)
        if inspect.isawaitable(tracker):
            tracker = await tracker
    except web.HTTPError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the admin, logged in full
        handler.log.exception("GPU capacity is unavailable")
        raise web.HTTPError(503, f"GPU capacity is unavailable: {exc.__class__.__name__}: {exc}") from exc
    # Whatever serves this page also feeds /hub/metrics (a no-op when already registered).
    snapshot = getattr(tracker, "snapshot", None)
    if callable(snapshot):
        metrics.add_capacity_source(snapshot)
    return tracker


class CapacityAPIHandler(APIHandler):
    """``GET /hub/api/gpuburst/capacity``: the capacity report as JSON."""

    def initialize(self, tracker_source: TrackerSource | None = None) -> None:
        self.tracker_source = tracker_source or default_tracker_source

    @needs_scope("admin:users")
    async def get(self) -> None:
        tracker = await _tracker(self, self.tracker_source)
        self.write(json.dumps(capacity_report(tracker)))


class CapacityPageHandler(BaseHandler):
    """``GET /hub/gpuburst/capacity``: the same report, rendered for people."""

    def initialize(self, tracker_source: TrackerSource | None = None) -> None:
        self.tracker_source = tracker_source or default_tracker_source

    @web.authenticated
    @needs_scope("admin-ui")
    @needs_scope("admin:users")
    async def get(self) -> None:
        tracker = await _tracker(self, self.tracker_source)
        report: dict[str, Any] = capacity_report(tracker)
        html = await self.render_template(
            PAGE_TEMPLATE, report=report, api_url=self.hub.base_url + API_PATH.lstrip("/"), gpu_name=names.gpu_name
        )
        self.finish(html)


def handlers(tracker_source: TrackerSource | None = None) -> list[tuple[str, type, dict[str, Any]]]:
    """Routes for ``JupyterHub.extra_handlers`` (the hub prefixes them with ``/hub``)."""
    kwargs = {"tracker_source": tracker_source}
    return [(API_PATH, CapacityAPIHandler, kwargs), (PAGE_PATH, CapacityPageHandler, kwargs)]
