"""What doctor reads from a cluster (``ClusterView``), and the two ways a read can fail."""

from __future__ import annotations

from typing import Any, Protocol


class ClusterView(Protocol):
    """What doctor reads from a cluster, as plain API-shaped dicts; a read the identity may not
    make raises ``NotPermitted``."""

    def list_nodes(self) -> list[dict[str, Any]]: ...

    def list_pods(self) -> list[dict[str, Any]]: ...

    def api_groups(self) -> set[str]: ...

    def access_review(self, verb: str, group: str, resource: str, namespace: str | None) -> tuple[bool, str]: ...

    def namespace_offloading(self, namespace: str) -> dict[str, Any] | None: ...

    def list_storage_classes(self) -> list[dict[str, Any]]: ...

    def vk_options_templates(self) -> list[dict[str, Any]]: ...


class ClusterUnreachable(RuntimeError):
    """The API server could not be reached or refused the question outright."""


class NotPermitted(RuntimeError):
    """The identity doctor runs as may not make one of its reads (401 or 403)."""
