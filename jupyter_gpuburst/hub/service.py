"""The ``gpuburst`` JupyterHub service: the admin capacity page and API, and the GPU kernel API.

Why a service, and why inside the hub process: JupyterHub's supported way to add HTTP endpoints
is a service (``JupyterHub.extra_handlers`` is deprecated). A managed service would be a second
process with a second inventory and reservation ledger, but capacity and kernel placement must
use the one ``CapacityTracker`` the spawner places with. So the hub registers an *external*
service (a ``url``, no ``command``) and this module serves that url from the hub's own event
loop. The proxy routes ``/services/gpuburst/`` to it like to any service; authentication is
JupyterHub's: OAuth (``HubOAuth``) for the page, tokens for the APIs.

URLs, under the hub's base URL:

- ``/services/gpuburst/capacity``: the page (login cookie, through OAuth; scope ``admin:users``,
  as the report names users and their servers)
- ``/services/gpuburst/api/capacity``: the JSON report (``Authorization: token ...``, same scope)
- ``/services/gpuburst/api/usage``, ``api/usage.csv``, ``api/budgets``: GPU-hours and budgets
  (``jupyter_gpuburst.hub.accounting.handlers``; same scope)
- ``/services/gpuburst/api/kernels``: the GPU kernel API of users' servers (see
  ``jupyter_gpuburst.hub.kernels.handlers`` for its scopes). Servers call it directly at the
  service's own address (``url`` below, e.g. ``http://hub:8082``), which
  the spawner passes them in ``$JUPYTER_GPUBURST_KERNELS_URL``: the same host as the hub API they
  already reach, so donor servers need no route through the public proxy.
- ``/services/gpuburst/labs`` and ``api/labs``: teachers' lab bookings (``jupyter_gpuburst.hub.labs.handlers``)
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import secrets
from functools import partial
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed, check_scopes
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.log import access_log, app_log
from traitlets import Bool
from traitlets.config import Config, Configurable

from jupyter_gpuburst.core import keys, names
from jupyter_gpuburst.hub import metrics
from jupyter_gpuburst.hub.accounting import counts_use, record_use
from jupyter_gpuburst.hub.accounting.dashboard import donor_rows, usage_panel
from jupyter_gpuburst.hub.accounting.handlers import handlers as accounting_handlers
from jupyter_gpuburst.hub.capacity.report import capacity_report
from jupyter_gpuburst.hub.culling.handlers import handlers as activity_handlers
from jupyter_gpuburst.hub.culling.live import hub_culler, refuses_start
from jupyter_gpuburst.hub.kernels.handlers import API_PATH as KERNELS_API_PATH
from jupyter_gpuburst.hub.kernels.handlers import REFUSED_REASON
from jupyter_gpuburst.hub.kernels.handlers import handlers as kernel_handlers
from jupyter_gpuburst.hub.labs.handlers import handlers as lab_handlers
from jupyter_gpuburst.hub.labs.settings import SCOPE as LABS_SCOPE
from jupyter_gpuburst.hub.stops import STOP_PATH, STOP_SCOPE
from jupyter_gpuburst.hub.stops import handlers as stop_handlers
from jupyter_gpuburst.hub.tokenapi import MAX_BODY_BYTES

# what the service's HTTP server reads of any body: past it Tornado answers 400 and closes; the
# token APIs read up to here to answer 413 (a body past MAX_BODY_BYTES is read, never kept)
READ_BODY_CEILING = 4 * MAX_BODY_BYTES

SERVICE_NAME = "gpuburst"
# The scope both URLs need; admins have it, and OAuth tokens of this service carry it for them.
REQUIRED_SCOPE = "admin:users"
PAGE_PATH = "capacity"
API_PATH = "api/capacity"
TEMPLATES = Path(__file__).with_name("templates")
PAGE_TEMPLATE = "gpuburst_capacity.html"
ERROR_TEMPLATE = "gpuburst_error.html"


class GPUBurstService(Configurable):
    """How the ``gpuburst`` service's own HTTP server treats its requests."""

    behind_trusted_proxy = Bool(
        False,
        help="""Whether the service's address is reached only through a proxy that sets
        ``X-Forwarded-For`` and ``X-Real-Ip`` itself (replacing what a client sent). Only then
        are those headers taken as the caller's address (in the access log). Off (default):
        users' servers call the service directly, and anything they put in those headers is
        ignored.""",
    ).tag(config=True)


def _hub_config() -> Config:
    from jupyterhub.app import JupyterHub

    return JupyterHub.instance().config if JupyterHub.initialized() else Config()


# the service of this hub process, once registered (the spawner reads its kernel API's URL)
_registered: "CapacityService | None" = None


def registered() -> "CapacityService | None":
    return _registered


def server_env() -> dict[str, str]:
    """The env a user's server needs to reach the service: the GPU kernel API and the GPU
    activity API (nothing when the service is not registered in this hub process: then no
    server is offered GPU kernels, and none reports its GPU activity)."""
    service = registered()
    if service is None:
        return {}
    return {keys.KERNELS_URL_ENV: service.kernels_url, keys.ACTIVITY_URL_ENV: f"{service.url}{service.prefix}{keys.ACTIVITY_API_PATH}"}


class CapacityService:
    """One per hub process: the service entry for ``JupyterHub.services`` and its HTTP server."""

    name = SERVICE_NAME

    def __init__(
        self, tracker_source: Any, bind_host: str, port: int, connect_host: str, registry_source: Any = None, base_url: str = "/"
    ) -> None:
        # the proxy forwards a service's whole path, the hub's base_url included
        self.prefix = f"/{base_url.strip('/')}/services/{SERVICE_NAME}/".replace("//", "/")
        self.tracker_source = tracker_source
        self.registry_source = registry_source
        # the GPU culler (tests may give their own)
        self.culler_source: Any = None
        # the hub's lab book (hub/labs/live.py; the installer sets it)
        self.lab_book_source: Any = None
        self.bind_host = bind_host
        self.port = port
        self.connect_host = connect_host
        # the service's OAuth client secret; generated per hub start, never logged or sent to users
        self.token = secrets.token_hex(32)
        self._server: HTTPServer | None = None
        # the config GPUBurstService is read from (None: the running hub's)
        self.config: Config | None = None

    @property
    def url(self) -> str:
        return f"http://{self.connect_host}:{self.port}"

    @property
    def kernels_url(self) -> str:
        """The kernel API as users' servers reach it: straight at the service, not via the proxy."""
        return f"{self.url}{self.prefix}{KERNELS_API_PATH}"

    def register(self) -> dict[str, Any]:
        """The entry for ``JupyterHub.services``; from now on the spawner passes ``kernels_url``."""
        global _registered
        _registered = self
        return self.entry()

    def entry(self) -> dict[str, Any]:
        return {
            "name": SERVICE_NAME,
            "display": False,
            "url": self.url,
            "api_token": self.token,
            "oauth_no_confirm": True,
            # the page's own scope, and the admin's admin:servers for its stop buttons (dropped
            # by the hub for whoever lacks it: they read the page and cannot stop)
            "oauth_client_allowed_scopes": [REQUIRED_SCOPE, STOP_SCOPE, LABS_SCOPE],
        }

    def start(self) -> None:
        """Listen on the running loop (the hub's): called while the hub loads its config."""
        if self._server is not None:
            return
        app = web.Application(
            [
                # people who open the service's own address, and the hub's health check
                (rf"{self.prefix}?", web.RedirectHandler, {"url": f"{self.prefix}{PAGE_PATH}", "permanent": False}),
                (rf"{self.prefix}{PAGE_PATH}/?", CapacityPageHandler),
                (rf"{self.prefix}{API_PATH}/?", CapacityAPIHandler),
                (rf"{self.prefix}oauth_callback", OAuthCallbackHandler),
                *kernel_handlers(self.prefix, self.registry_source),
                *activity_handlers(self.prefix, self.culler_source or partial(hub_culler, self.token)),
                *accounting_handlers(self.prefix, _Authenticated),
                *stop_handlers(self.prefix, _Authenticated, self),
                *lab_handlers(self.prefix, _Authenticated, lambda: self.lab_book_source() if self.lab_book_source else None),
            ],
            service=self,
            kernel_start_refusal=refuses_start,
            # what servers report of their GPUs' use goes to the GPU-hours ledger (right-sizing)
            gpu_use_sink=record_use,
            gpu_use_wanted=counts_use,
            cookie_secret=secrets.token_bytes(32),
            templates=Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape()),
            log_function=log_request,
        )
        settings = GPUBurstService(config=self.config if self.config is not None else _hub_config())
        self._server = HTTPServer(app, xheaders=settings.behind_trusted_proxy, max_body_size=READ_BODY_CEILING)
        self._server.listen(self.port, self.bind_host)
        app_log.info("GPU capacity service listening on %s:%s (%s)", self.bind_host, self.port, self.url)

    def hub_auth(self) -> Any:
        """HubOAuth for this service, from the running hub (built on first use: the hub's URLs
        are known only once it has initialized)."""
        auth = getattr(self, "_hub_auth", None)
        if auth is None:
            from jupyterhub.app import JupyterHub
            from jupyterhub.services.auth import HubOAuth

            hub_app = JupyterHub.instance()
            prefix = self.prefix
            auth = HubOAuth(
                api_token=self.token,
                api_url=hub_app.hub.api_url,
                hub_prefix=hub_app.hub.base_url,
                base_url=prefix,
                oauth_client_id=f"service-{SERVICE_NAME}",
                oauth_redirect_uri=f"{prefix}oauth_callback",
                access_scopes={REQUIRED_SCOPE},
                cache_max_age=60,
            )
            self._hub_auth = auth
        return auth


def log_request(handler: web.RequestHandler) -> None:
    """Failures at warning and error; the rest at debug, unless slow: every GPU kernel's server
    asks after it every few seconds, which at info would drown the hub's log. The path only:
    an OAuth callback's query carries its code. A GPU kernel refused for want of a GPU (503) is
    the hub working as meant, at warning: errors are for what an admin must look into."""
    status = handler.get_status()
    request = handler.request
    ms = 1000.0 * request.request_time()
    if status >= 500 and not (status == 503 and handler._reason == REFUSED_REASON):
        level = logging.ERROR
    elif status >= 400:
        level = logging.WARNING
    else:
        level = logging.INFO if ms >= 1000 else logging.DEBUG
    access_log.log(level, "%d %s %s (%s) %.2fms", status, request.method, request.path, request.remote_ip, ms)


class _Authenticated(HubOAuthenticated, web.RequestHandler):
    @property
    def service(self) -> CapacityService:
        return self.settings["service"]

    @property
    def hub_auth(self) -> Any:
        return self.service.hub_auth()

    async def prepare(self) -> None:
        if len(self.request.body or b"") > MAX_BODY_BYTES:
            raise web.HTTPError(413, f"the request body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
        # The hub answers "who is this token" on this same event loop: HubAuth's blocking
        # lookup (the default of get_current_user) would wait for a reply it is blocking.
        user = await self.hub_auth.get_user(self, sync=False)
        self._hub_auth_user_cache = None
        if user:
            try:
                self._hub_auth_user_cache = self.check_hub_user(user)
            except UserNotAllowed:
                raise web.HTTPError(403, f"GPU capacity is for the hub's admins (it needs the {REQUIRED_SCOPE} scope).") from None

    async def tracker(self) -> Any:
        try:
            tracker = self.service.tracker_source()
            if asyncio.iscoroutine(tracker):
                tracker = await tracker
        except Exception as exc:  # logged in full; the admin sees the kind of failure
            app_log.exception("GPU capacity is unavailable")
            raise web.HTTPError(503, f"GPU capacity is unavailable: {exc.__class__.__name__}") from exc
        # whatever serves this page also feeds /hub/metrics (a no-op when already registered)
        snapshot = getattr(tracker, "snapshot", None)
        if callable(snapshot):
            metrics.add_capacity_source(snapshot)
        return tracker


class CapacityAPIHandler(_Authenticated):
    """``GET /services/gpuburst/api/capacity``: the capacity report as JSON."""

    def get_login_url(self) -> str:
        # an API client gets 403, not a redirect to the login page
        raise web.HTTPError(403, f"a token with the {REQUIRED_SCOPE} scope is needed")

    @web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(capacity_report(await self.tracker())))


class CapacityPageHandler(_Authenticated):
    """``GET /services/gpuburst/capacity``: the same report, rendered for people."""

    @web.authenticated
    async def get(self) -> None:
        tracker = await self.tracker()
        report = capacity_report(tracker)
        template = self.settings["templates"].get_template(PAGE_TEMPLATE)
        api_url = f"{self.hub_auth.base_url}{API_PATH}"
        usage = usage_panel(tracker, self.hub_auth.base_url)
        # the stop buttons, for admins whose login may stop servers (hub/stops)
        may_stop = check_scopes({STOP_SCOPE}, set((self.current_user or {}).get("scopes") or ()))
        stop = {"url": f"{self.hub_auth.base_url}{STOP_PATH}", "xsrf": self.xsrf_token.decode()} if may_stop else None
        self.finish(
            template.render(
                report=report,
                api_url=api_url,
                hub_prefix=self.hub_auth.hub_prefix,
                user_name=(self.current_user or {}).get("name"),
                gpu_name=names.gpu_name,
                usage=usage,
                stop=stop,
                donors=donor_rows(usage["donors"] if usage else [], report["donors"]),
            )
        )

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # a person's page, with a way back; the reason only where it is meant for them
        exc = kwargs.get("exc_info", (None, None, None))[1]
        said = exc.log_message if isinstance(exc, web.HTTPError) and not exc.args else None
        message = said or "Something went wrong; the hub's log says what."
        template = self.settings["templates"].get_template(ERROR_TEMPLATE)
        try:
            hub_prefix = self.hub_auth.hub_prefix
        except Exception:  # noqa: BLE001 - the error page must not fail in turn
            hub_prefix = "/hub/"
        try:
            title = http.HTTPStatus(status_code).phrase
        except ValueError:
            title = "Error"
        self.finish(template.render(status_code=status_code, title=title, message=message, hub_prefix=hub_prefix))


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    @property
    def hub_auth(self) -> Any:
        return self.settings["service"].hub_auth()
