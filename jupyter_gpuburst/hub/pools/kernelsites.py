"""Where pre-started GPU kernels wait: the sites and GPU kernel profiles of the admin's kernel
pools and of those lab bookings ask for now. The kernel API asks it of each GPU kernel start
(a start placed on such a site tries the waiting kernels first, hub/kernels/prestarted); the
running pools tell it which booked pools are on (hub/pools/live)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

_running: Callable[[], Iterable[tuple[str, str]]] | None = None


def follow(source: Callable[[], Iterable[tuple[str, str]]] | None) -> None:
    """Take the (site, profile) pairs of the kernel pools that run now from ``source()`` (None: none run)."""
    global _running
    _running = source


class KernelPoolSites:
    """The (site, GPU kernel profile) pairs where pre-started kernels wait: ``static``, the
    admin's pools, and those of booked labs the running pools keep now."""

    def __init__(self, static: Iterable[tuple[str, str]]) -> None:
        self.static = frozenset(static)

    def _now(self) -> frozenset[tuple[str, str]]:
        return self.static | frozenset(_running()) if _running is not None else self.static

    def __contains__(self, item: object) -> bool:
        return item in self._now()

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._now())
