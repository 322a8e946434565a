"""How the emulated API server reads requests and writes answers: compact JSON, query values."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim.errors import ApiError, bad_request

JSON = "application/json"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(obj), status=status, content_type=JSON)


def truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {raw!r}") from None


def wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})
