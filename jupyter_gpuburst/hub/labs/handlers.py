"""The labs page and its JSON API, served by the ``gpuburst`` service (hub/service.py).

URLs, under the service's prefix ``/services/gpuburst/``, for users granted
``custom:gpuburst:labs`` (every class) or ``custom:gpuburst:labs!group=<class>`` (that class),
and for admins (``admin:users``), who also approve:

- ``labs``: the page (login cookie, through OAuth)
- ``GET api/labs``: the bookings, the caller's classes and profiles, the limits
- ``POST api/labs/preview``: a booking's GPU-hours and the capacity then; saves nothing
- ``POST api/labs``: save a booking (201), or 400 with one sentence and nothing saved
- ``POST api/labs/<id>/cancel``, ``POST api/labs/<id>/approve`` (admins)
- ``GET api/labs/<id>/report?lab=N``: how its lab N (default: the latest begun) went
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from jupyterhub.services.auth import check_scopes
from tornado import web

from jupyter_gpuburst.hub.labs import cost
from jupyter_gpuburst.hub.labs.model import APPROVED, CANCELLED, Booking
from jupyter_gpuburst.hub.labs.settings import SCOPE
from jupyter_gpuburst.hub.labs.validation import BookingError
from jupyter_gpuburst.hub.tokenapi import MAX_BODY_BYTES

PAGE_PATH = "labs"
API_PATH = "api/labs"
ADMIN_SCOPE = "admin:users"
TEMPLATE = "gpuburst_labs.html"


def may_book(scopes: set[str], group: str | None = None) -> bool:
    """Whether ``scopes`` may book labs (for ``group``, where named)."""
    if check_scopes({ADMIN_SCOPE}, scopes):
        return True
    if group is None:
        return any(s == SCOPE or s.startswith(f"{SCOPE}!") for s in scopes)
    return bool(check_scopes({f"{SCOPE}!group={group}"}, scopes))


def handlers(prefix: str, base: type, book_source: Callable[[], Any]) -> list[tuple[str, type]]:
    """The handlers, on ``base``: the service's OAuth-authenticated handler class;
    ``book_source()`` gives the hub's lab book (hub/labs/live.py), None while it is not open."""

    class _Labs(base):  # type: ignore[misc, valid-type]
        async def prepare(self) -> None:
            if len(self.request.body or b"") > MAX_BODY_BYTES:
                raise web.HTTPError(413, "the request body is too large")
            user = await self.hub_auth.get_user(self, sync=False)
            self._hub_auth_user_cache = None
            if user:
                if not may_book(set(user.get("scopes") or ())):
                    raise web.HTTPError(403, f"Booking labs needs the {SCOPE} scope; ask your hub's admins.")
                self._hub_auth_user_cache = user

        @property
        def scopes(self) -> set[str]:
            return set((self.current_user or {}).get("scopes") or ())

        @property
        def is_admin(self) -> bool:
            return bool(check_scopes({ADMIN_SCOPE}, self.scopes))

        def lab_book(self) -> Any:
            found = book_source()
            if found is None:
                raise web.HTTPError(503, "Lab bookings are not available on this hub now; its log says why.")
            return found

        def body(self) -> dict[str, Any]:
            try:
                body = json.loads(self.request.body or b"{}")
            except (ValueError, RecursionError):
                raise web.HTTPError(400, "the request body must be JSON") from None
            if not isinstance(body, dict):
                raise web.HTTPError(400, "the request body must be a JSON object")
            return body

        def check_group(self, body: dict[str, Any]) -> None:
            group = body.get("group")
            if isinstance(group, str) and group and not may_book(self.scopes, group):
                raise web.HTTPError(403, f"You may not book labs for the group {group}.")

        def write_json(self, data: Any, status: int = 200) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(data))

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            exc = kwargs.get("exc_info", (None, None, None))[1]
            message = "The booking failed; the hub's log says why"
            if isinstance(exc, web.HTTPError) and exc.log_message:
                message = exc.log_message % exc.args if exc.args else exc.log_message
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status_code, "message": message}))

    class LabsAPIHandler(_Labs):
        def get_login_url(self) -> str:
            raise web.HTTPError(403, f"a token with the {SCOPE} scope is needed")

        @web.authenticated
        async def get(self) -> None:
            book = self.lab_book()
            self.write_json(overview(book, self.current_user["name"], self.scopes, self.is_admin))

        @web.authenticated
        async def post(self, action: str | None = None) -> None:
            book, body = self.lab_book(), self.body()
            self.check_group(body)
            try:
                if action == "preview":
                    self.write_json(book.preview(body, self.current_user["name"]))
                    return
                booking = book.save(body, self.current_user["name"])
            except BookingError as exc:
                raise web.HTTPError(400, "%s", str(exc)) from None
            self.write_json(booking_json(booking, book), 201)

    class LabActionHandler(_Labs):
        def get_login_url(self) -> str:
            raise web.HTTPError(403, f"a token with the {SCOPE} scope is needed")

        @web.authenticated
        async def post(self, booking_id: str, action: str) -> None:
            book = self.lab_book()
            booking = book.get(booking_id)
            if booking is None or not (self.is_admin or booking.teacher == self.current_user["name"]):
                raise web.HTTPError(404, "%s", f"There is no booking {booking_id!r}.")
            if action == "approve" and not self.is_admin:
                raise web.HTTPError(403, "Only the hub's admins approve bookings.")
            try:
                booking = book.set_status(booking_id, APPROVED if action == "approve" else CANCELLED)
            except BookingError as exc:
                raise web.HTTPError(400, "%s", str(exc)) from None
            self.write_json(booking_json(booking, book))

    class LabReportHandler(_Labs):
        def get_login_url(self) -> str:
            raise web.HTTPError(403, f"a token with the {SCOPE} scope is needed")

        @web.authenticated
        async def get(self, booking_id: str) -> None:
            book = self.lab_book()
            booking = book.get(booking_id)
            if booking is None or not (
                self.is_admin or booking.teacher == self.current_user["name"] or may_book(self.scopes, booking.group)
            ):
                raise web.HTTPError(404, "%s", f"There is no booking {booking_id!r}.")
            raw = self.get_argument("lab", None)
            if raw is not None and not raw.isdigit():
                raise web.HTTPError(400, "lab is the number of one of the booking's labs, 0 for the first")
            try:
                self.write_json(book.report(booking_id, int(raw) if raw is not None else None))
            except BookingError as exc:
                raise web.HTTPError(400, "%s", str(exc)) from None

    class LabsPageHandler(_Labs):
        @web.authenticated
        async def get(self) -> None:
            template = self.settings["templates"].get_template(TEMPLATE)
            book = self.lab_book()
            self.finish(
                template.render(
                    hub_prefix=self.hub_auth.hub_prefix,
                    user_name=self.current_user["name"],
                    api_url=f"{self.hub_auth.base_url}{API_PATH}",
                    xsrf=self.xsrf_token.decode(),
                    data=overview(book, self.current_user["name"], self.scopes, self.is_admin),
                )
            )

    return [
        (rf"{prefix}{PAGE_PATH}/?", LabsPageHandler),
        (rf"{prefix}{API_PATH}/?", LabsAPIHandler),
        (rf"{prefix}{API_PATH}/(preview)", LabsAPIHandler),
        (rf"{prefix}{API_PATH}/([0-9a-f]+)/(cancel|approve)", LabActionHandler),
        (rf"{prefix}{API_PATH}/([0-9a-f]+)/report", LabReportHandler),
    ]


def booking_json(booking: Booking, book: Any) -> dict[str, Any]:
    data = booking.as_json()
    data["gpu_hours"] = round(cost.gpu_hours(booking, dt.timedelta(minutes=book.settings.warmup_minutes)), 2)
    data["when"] = [cost.when(s, e, book.tz) for s, e in booking.occurrences()]
    return data


def overview(book: Any, user: str, scopes: set[str], is_admin: bool) -> dict[str, Any]:
    groups = sorted(g for g in book.groups() if may_book(scopes, g))
    settings = book.settings
    return {
        "bookings": [booking_json(b, book) for b in book.bookings() if b.status != CANCELLED],
        "groups": groups,
        "profiles": {slug: {"resource": r, "gpus": n} for slug, (r, n) in sorted(book.profiles.items())},
        # a lab in kernel mode ("mode": "kernel") books one of these
        "kernel_profiles": {slug: {"resource": r, "gpus": n} for slug, (r, n) in sorted(book.kernel_profiles.items())},
        "timezone": str(book.tz),
        "warmup_minutes": settings.warmup_minutes,
        "approval": settings.require_approval,
        "limits": {
            "teacher": settings.weekly_limit(settings.teacher_weekly_hours, user),
            "groups": {g: settings.weekly_limit(settings.group_weekly_hours, g) for g in groups},
            "group_profiles": {g: settings.group_profiles[g] for g in groups if g in settings.group_profiles},
            "group_kernel_profiles": {g: settings.group_kernel_profiles[g] for g in groups if g in settings.group_kernel_profiles},
        },
        "is_admin": is_admin,
        "user": user,
    }
