"""A GPU kernel that waits in the hub's queue for a GPU (``GPUKernelSettings.queue_when_full``).

The request is accepted at once (its record says "pending" and its place in line), waits in the
same first-come-first-served line as servers' spawns (``hub.queue``), and is placed and started
when its turn comes and a site has room. Shutting the kernel down (``KernelRegistry.stop``)
cancels the wait and takes it out of the line; a wait that ends without a GPU fails the record
with the reason, which the user's server gives the cells that waited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement
from jupyter_gpuburst.hub.queue import wait as queue_wait
from jupyter_gpuburst.hub.queue.estimate import Estimate, ordinal, wait_text


@dataclass(frozen=True)
class Line:
    """Where a waiting kernel stands: its place in line and the expected wait."""

    position: int
    wait: Estimate

    def as_dict(self) -> dict[str, Any]:
        return {"position": self.position, **self.wait.as_dict(), "text": waiting_text(self)}


def waiting_text(line: Line) -> str:
    """'a GPU: 2nd in line, about 3 min', what the status bar and the panel say it waits for."""
    place = "next in line" if line.position == 1 else f"{ordinal(line.position)} in line"
    return f"a GPU: {place}, {wait_text(line.wait)}"


async def start_when_free(
    registry: Any,
    record: Any,
    request: GPURequest,
    prefer_site: str | None,
    launch: Callable[[Placement], Awaitable[None]],
    refusal: Callable[[], str | None] | None = None,
) -> None:
    """Wait in line for ``record`` (a ``KernelRecord`` of ``registry``), then ``launch`` it where it was placed; fail it with the
    reason when the wait ends without a GPU, ``refusal`` refuses it now (a budget used up while
    it waited), or the launch fails."""

    def tell(text: str, position: int, wait: Estimate) -> None:
        record.line = Line(position, wait)
        record.notify()

    try:
        outcome = await queue_wait.wait_in_line(
            registry.tracker,
            record.key,
            request,
            lambda: registry._place(record, request, prefer_site),
            tell,
            registry.settings.start_timeout,
        )
    finally:
        record.line = None
    if isinstance(outcome, NoCapacity):
        await registry._fail(record, outcome.reason)
        return
    # asked again at its turn: the hours its user's other sessions used meanwhile count
    why = refusal() if refusal is not None else None
    if why:
        await registry._fail(record, why)
        return
    try:
        await launch(outcome)
    except Exception as exc:  # noqa: BLE001 - KernelError carries the student's sentence
        await registry._fail(record, getattr(exc, "message", None) or f"could not start the GPU kernel ({exc.__class__.__name__})")
        return
    # from here the pod's start is followed as for a kernel placed at once
    record.notify()
