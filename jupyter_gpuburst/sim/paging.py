"""List chunking (``limit``/``continue``) tokens in kube-apiserver's format.

A token is base64 of ``{"v": "meta.k8s.io/v1", "rv": <version of the first chunk>, "start":
<storage key to go on from>}``; clients treat it as opaque, but its shape is kept so that a token
logged from a real cluster and one from here read alike.
"""

from __future__ import annotations

import base64
import json

from jupyter_gpuburst.sim.errors import ApiError, bad_request

_VERSION = "meta.k8s.io/v1"


def key_string(key: tuple[str, str]) -> str:
    """A store key as the path-like key kube-apiserver pages on (``ns/name``, ``name``)."""
    ns, name = key
    return f"{ns}/{name}" if ns else name


def encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": _VERSION, "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """(resourceVersion, start key); 400 for a token this server did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        if data.get("v") != _VERSION or not isinstance(data.get("rv"), int) or not isinstance(data.get("start"), str):
            raise ValueError("unknown shape")
    except (ValueError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from None
    if data["rv"] <= 0:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    return data["rv"], data["start"]


def expired(fresh_token: str) -> ApiError:
    """410 for a token older than the history, with the inconsistent token to go on with."""
    err = ApiError(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list "
        "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
        "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
        "modified, or deleted between the time the first chunk was returned and now may show up in the list.",
    )
    err.list_continue = fresh_token
    return err
