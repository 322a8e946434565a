"""A class whose lab is on goes first: ahead in the line, and the GPUs booked for it are held
from everyone else until its students have taken them.

The lab bookings (hub/labs) provide both answers here, as the culler provides sessions' ends
(``hub.queue.ends``); with no provider nobody goes first and nothing is held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.core.placement import GPURequest, NoCapacity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hold:
    """GPU units of a resource held for labs the requester is not in, and what to tell them."""

    units: int
    sentence: str  # "4 GPUs are held for the lab ML-101 until 10:30."


GoesFirst = Callable[[GPURequest], bool]
HoldFor = Callable[[GPURequest], Hold | None]
# (user, groups, when the start was asked for, when the server was ready or None): a lab's report
NoteStart = Callable[[str, frozenset[str], float, float | None], None]
_goes_first: GoesFirst | None = None
_hold_for: HoldFor | None = None
_note_start: NoteStart | None = None
# kernel mode: (user, groups, GPU resource, when a GPU kernel was asked for) and
# (user, GPU resource, when a cell first ran on one of their GPU kernels)
NoteKernelAsked = Callable[[str, frozenset[str], str, float], None]
NoteFirstCell = Callable[[str, str, float], None]
_note_kernel_asked: NoteKernelAsked | None = None
_note_first_cell: NoteFirstCell | None = None
# server mode: (user, GPU resource, when a cell first ran in their GPU server's own kernels)
_note_server_first_cell: NoteFirstCell | None = None


def provide(
    goes_first: GoesFirst | None,
    hold_for: HoldFor | None,
    note_start: NoteStart | None = None,
    note_kernel_asked: NoteKernelAsked | None = None,
    note_first_cell: NoteFirstCell | None = None,
    note_server_first_cell: NoteFirstCell | None = None,
) -> None:
    global _goes_first, _hold_for, _note_start, _note_kernel_asked, _note_first_cell, _note_server_first_cell
    _goes_first, _hold_for, _note_start = goes_first, hold_for, note_start
    _note_kernel_asked, _note_first_cell, _note_server_first_cell = note_kernel_asked, note_first_cell, note_server_first_cell


def _tell(hook: Callable[..., None] | None, what: str, user: str, *args: Any) -> None:
    # a lab's report never fails the start or the activity report it hears from
    if hook is None:
        return
    try:
        hook(user, *args)
    except Exception:  # noqa: BLE001
        log.warning("Could not note %s's %s for a lab's report", user, what, exc_info=True)


def note_start(user: str, groups: frozenset[str], asked: float, ready: float | None = None) -> None:
    """A server start asked for at ``asked`` (wall clock), ready at ``ready`` once it is."""
    _tell(_note_start, "start", user, groups, asked, ready)


def note_kernel_asked(user: str, groups: frozenset[str], resource: str, asked: float) -> None:
    """A GPU kernel of ``resource`` asked for at ``asked`` (wall clock)."""
    _tell(_note_kernel_asked, "GPU kernel", user, groups, resource, asked)


def note_first_cell(user: str, resource: str, ran: float) -> None:
    """A cell first ran at ``ran`` (wall clock) on a GPU kernel of ``user`` holding ``resource``."""
    _tell(_note_first_cell, "first GPU cell", user, resource, ran)


def note_server_first_cell(user: str, resource: str, ran: float) -> None:
    """A cell first ran at ``ran`` (wall clock) in a kernel of ``user``'s GPU server holding ``resource``."""
    _tell(_note_server_first_cell, "first cell in their GPU server", user, resource, ran)


def goes_first(request: GPURequest) -> bool:
    """Whether ``request`` belongs to a class whose lab is on now."""
    if _goes_first is None:
        return False
    try:
        return _goes_first(request)
    except Exception:  # noqa: BLE001 - the line must form whatever the bookings say
        log.warning("No lab priority for %s", request.user, exc_info=True)
        return False


def hold_for(request: GPURequest) -> Hold | None:
    """What is held now from ``request`` for other classes' labs (None: nothing)."""
    if _hold_for is None:
        return None
    try:
        return _hold_for(request)
    except Exception:  # noqa: BLE001 - a placement must not fail for a booking's sake
        log.warning("No lab hold for %s", request.user, exc_info=True)
        return None


def refusal_on(request: GPURequest, snapshot: Callable[[], Any]) -> NoCapacity | None:
    """``refusal`` with the free units of the capacity tracker's ``snapshot()``."""
    return refusal(request, lambda: [(name, site.total(request.resource).free) for name, site in snapshot().sites.items()])


def refusal(request: GPURequest, free_by_site: Callable[[], Iterable[tuple[str, int]]]) -> NoCapacity | None:
    """NoCapacity where what the request's sites have free of its GPU, less what is held for
    other classes, leaves it too little (``free_by_site()``: (site, free units of its resource),
    read only where something is held: a spawn at a lab's rush pays nothing for it otherwise)."""
    hold = hold_for(request)
    if hold is None or hold.units <= 0:
        return None
    allowed = request.allowed_sites
    free = sum(units for site, units in free_by_site() if allowed is None or site in allowed)
    if free - hold.units >= request.count:
        return None
    return NoCapacity(hold.sentence)
