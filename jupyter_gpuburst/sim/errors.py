"""Kubernetes API errors, carried as exceptions and rendered as ``Status`` objects.

The wording follows kube-apiserver exactly (clients and people match on it): see
``k8s.io/apimachinery/pkg/api/errors``.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure with the HTTP ``code``, the Status ``reason`` and a ``message``."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        # Status.metadata.continue, sent with an expired list token (see sim.paging).
        self.list_continue: str | None = None

    def status(self) -> dict[str, Any]:
        """The ``Status`` body kube-apiserver sends for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {"continue": self.list_continue} if self.list_continue else {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def qualified(plural: str, group: str = "") -> str:
    """``pods`` for the core group, ``<plural>.<group>`` otherwise."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def not_found(resource_kind_plural: str, name: str, group: str = "") -> ApiError:
    """404 NotFound: ``pods "x" not found``."""
    return ApiError(
        404,
        "NotFound",
        f'{qualified(resource_kind_plural, group)} "{name}" not found',
        _details(name, resource_kind_plural, group),
    )


def already_exists(resource_kind_plural: str, name: str, group: str = "") -> ApiError:
    """409 AlreadyExists: ``pods "x" already exists``."""
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource_kind_plural, group)} "{name}" already exists',
        _details(name, resource_kind_plural, group),
    )


def conflict(resource_kind_plural: str, name: str, group: str = "", why: str | None = None) -> ApiError:
    """409 Conflict, by default the optimistic-concurrency wording of a stale resourceVersion."""
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource_kind_plural, group)} "{name}": {why}',
        _details(name, resource_kind_plural, group),
    )


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid; ``causes`` are ``{"field", "reason", "message"}`` dicts (FieldValueRequired ...)."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{k: c[k] for k in ("reason", "message", "field") if c.get(k)} for c in causes]
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def gone(message: str) -> ApiError:
    """410 Expired, e.g. ``too old resource version: 5 (120)``."""
    return ApiError(410, "Expired", message)


def bad_request(message: str) -> ApiError:
    """400 BadRequest, e.g. ``field label not supported: spec.foo``."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message)


def forbidden(message: str) -> ApiError:
    """403 Forbidden."""
    return ApiError(403, "Forbidden", message)


def unsupported_media_type(content_type: str) -> ApiError:
    """415 for a PATCH with a content type the server does not know."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type!r})",
    )
