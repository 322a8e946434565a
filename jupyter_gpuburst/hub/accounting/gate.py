"""What the spawner and the GPU kernel API ask before placing: the user's budget, and a refusal."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from jupyter_gpuburst.hub.accounting.budgets import BudgetStatus

log = logging.getLogger(__name__)


def budget_of(tracker: Any, user: str, groups: Iterable[str], admin: bool = False) -> BudgetStatus | None:
    """The tightest GPU-hour budget ``user`` has now; None for admins, or with no budgets."""
    accounting = getattr(tracker, "accounting", None)
    if admin or accounting is None or not accounting.settings.has_budgets:
        return None
    try:
        return accounting.budgets.tightest(user, groups)
    except Exception:  # a ledger that cannot be read must not stop every spawn
        log.exception("Could not read the GPU-hour budget of %s; not enforcing it", user)
        return None


def budget_refusal(tracker: Any, user: str, groups: Iterable[str], admin: bool = False) -> str | None:
    """The sentence that refuses a GPU request of ``user``, or None when they have hours left."""
    status = budget_of(tracker, user, groups, admin)
    return status.refusal() if status is not None and status.exhausted else None


def budget_note(tracker: Any, user: str, groups: Iterable[str], admin: bool = False) -> str:
    """What the spawn form says about the user's budget, or ""."""
    return budget_state(tracker, user, groups, admin)[0]


def budget_state(tracker: Any, user: str, groups: Iterable[str], admin: bool = False) -> tuple[str, bool]:
    """What the spawn form and the GPU kernel launcher say about the user's budget ("" without
    one), and whether it is used up (a GPU request would be refused)."""
    status = budget_of(tracker, user, groups, admin)
    if status is None:
        return "", False
    return (status.refusal(), True) if status.exhausted else (f"{status.sentence()}.", False)
