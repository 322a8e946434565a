"""The budget stop: a GPU server or kernel whose user's GPU-hour budget is used up is warned, then
stopped ``grace_s`` later like an idle one, unless an admin grants more hours first.

The culler asks once per sweep which of its users' budgets are used up (``refresh``), and each
target's decision reads that (``decision``), so a report's reply costs no ledger read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.hub.culling.policy import Decision

# what the student reads in the panel, on the spawn page and in the notebook
BUDGET_REASON = "your GPU-hour budget is used up ({sentence})"
MORE_HOURS = "Ask the hub's admins for more hours."

# (user, groups, admin) -> the user's tightest budget (a BudgetStatus) or None
StatusOf = Callable[[str, frozenset[str], bool], Awaitable[Any]]


@dataclass(frozen=True)
class BudgetRule:
    """What happens to running GPU sessions of a user whose budget is used up."""

    stop: bool  # False: warned only; the session runs on (the next GPU request is refused)
    grace_s: float  # from the warning to the stop


class BudgetWatch:
    """Which users' budgets are used up now, and since when (hub clock)."""

    def __init__(self, rule: BudgetRule, status_of: StatusOf, log: logging.Logger | None = None) -> None:
        self.rule = rule
        self.status_of = status_of
        self.log = log or logging.getLogger(__name__)
        self.used_up: dict[str, tuple[float, str]] = {}  # user -> (since, the budget's sentence)

    async def refresh(self, users: Mapping[str, tuple[frozenset[str], bool]], now: float) -> None:
        """Read the budgets of ``users`` (name -> (groups, admin)). A budget with hours again
        (an admin's grant, a new period) ends its user's warning: the stop is cancelled."""
        used_up: dict[str, tuple[float, str]] = {}
        for user, (groups, admin) in users.items():
            try:
                status = await self.status_of(user, groups, admin)
            except Exception:  # noqa: BLE001 - a budget that cannot be read stops nothing
                self.log.warning("GPU budget: could not read %s's budget; nothing of theirs is stopped for it", user, exc_info=True)
                continue
            if status is None or not status.exhausted:
                if user in self.used_up:
                    self.log.info("GPU budget: %s has GPU-hours again; their sessions are no longer stopped", user)
                continue
            since = self.used_up[user][0] if user in self.used_up else now
            if user not in self.used_up:
                self.log.info("GPU budget: %s's budget is used up (%s); warning their GPU sessions", user, status.sentence())
            used_up[user] = (since, status.sentence())
        self.used_up = used_up

    def decision(self, user: str, now: float) -> Decision | None:
        """The budget's decision for one of ``user``'s GPU sessions, or None (hours left)."""
        entry = self.used_up.get(user)
        if entry is None:
            return None
        since, sentence = entry
        reason = BUDGET_REASON.format(sentence=sentence)
        if not self.rule.stop:
            return Decision("warn", None, None, reason, cause="budget")
        stops_in = since + self.rule.grace_s - now
        if stops_in <= 0:
            return Decision("stop", None, 0.0, reason, cause="budget")
        return Decision("warn", None, stops_in, reason, cause="budget")


def sooner(idle: Decision, budget: Decision | None) -> Decision:
    """The decision that acts first: an idle (or age) stop that comes before the budget's keeps
    its own reason and Keep; otherwise the budget's, with the idle time still shown."""
    if budget is None:
        return idle
    if idle.action in ("warn", "stop") and (budget.stops_in_s is None or (idle.stops_in_s or 0.0) <= budget.stops_in_s):
        return idle
    return Decision(budget.action, idle.idle_s, budget.stops_in_s, budget.reason, cause=budget.cause)
