"""The GPU-hours accounting and budget settings (``c.GPUAccountingSettings``), as traitlets."""

from __future__ import annotations

import math
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, validate
from traitlets.config import Configurable

from jupyter_gpuburst.hub.accounting.periods import KINDS, PeriodError, parse_semesters

LEDGER_FILE = "gpuburst-usage.sqlite"
EVERYONE = "*"


class AccountingConfigError(ValueError):
    """A budget or period setting that makes no sense; the hub does not start with it."""


class GPUAccountingSettings(Configurable):
    """Where GPU usage is kept, what Prometheus may see, and the GPU-hour budgets."""

    enabled = Bool(True, config=True, help="Count GPU-hours of every GPU server and GPU kernel the hub places.")
    ledger_path = Unicode(
        "",
        config=True,
        help=f"""The ledger's SQLite file. Empty (default): {LEDGER_FILE} beside the hub's SQLite
        database (JupyterHub.db_url), or in the hub's working directory when the hub's database
        is not SQLite. Put it on the hub's persistent volume: it must survive hub restarts.""",
    )
    flush_seconds = Float(
        60.0,
        config=True,
        help="How often running sessions are written to the ledger (a hub killed between two writes counts the time once it is back).",
    )
    metrics_usernames = Bool(
        False,
        config=True,
        help="""Add a ``user`` label to the GPU-seconds counters at /hub/metrics. Off by default:
        anyone who can scrape the metrics would see who used what.""",
    )
    right_sizing_sessions = Int(
        5,
        config=True,
        help="""How many of a user's latest GPU sessions with measured GPU memory the spawn form's
        and the GPU kernel launcher's right-sizing sentence reads; with fewer, it says nothing.
        0 turns the sentence off.""",
    )
    right_sizing_headroom = Float(
        0.2,
        config=True,
        help="""The margin a smaller profile must hold above the sessions' peak GPU memory to be
        suggested, as a fraction (0.2: 20% more than the peak).""",
    )
    right_sizing_small_share = Float(
        0.5,
        config=True,
        help="""The capacity page lists profiles whose sessions' median peak GPU memory is at most
        this share of the GPU memory they hold (0-1).""",
    )
    right_sizing_days = Float(
        30.0,
        config=True,
        help="How many days of sessions the capacity page's right-sizing list reads.",
    )
    budget_period = Enum(
        list(KINDS), "week", config=True, help="The period GPU-hour budgets are for: day, week (Monday to Sunday, UTC), month or semester."
    )
    user_budgets = Dict(
        value_trait=Float(),
        config=True,
        help=f"""Username -> GPU-hours each period; "{EVERYONE}" is everyone's unless named.
        A GPU-hour is one GPU (or one MIG slice) held for an hour. Admins are exempt.""",
    )
    group_budgets = Dict(
        value_trait=Float(),
        config=True,
        help="Group name -> GPU-hours each period for all of the group's members together.",
    )
    budget_stop = Bool(
        True,
        config=True,
        help="""Stop a running GPU server or GPU kernel whose user's budget is used up,
        ``budget_grace_seconds`` after the Lab panel and status bar warn of it, as GPU idle
        culling stops one (an admin's grant before then cancels the stop; admins are exempt).
        False: warn only; the session runs on, and the next GPU request is refused.""",
    )
    budget_grace_seconds = Float(
        600.0,
        config=True,
        help="""Seconds from the warning that a running session's budget is used up to its stop
        (``budget_stop``). Checked every ``GPUCullingSettings.period_seconds``.""",
    )
    semesters = List(
        Dict(),
        config=True,
        help="""Named semesters for reports and semester budgets:
        ``[{"name": "Fall 2026", "start": "2026-09-01", "end": "2027-01-31"}]`` (dates inclusive).""",
    )

    @validate("user_budgets", "group_budgets")
    def _hours(self, proposal: dict[str, Any]) -> dict[str, float]:
        for who, hours in proposal["value"].items():
            if not math.isfinite(hours) or hours < 0:
                raise AccountingConfigError(f"{proposal['trait'].name}[{who!r}] must be a number of GPU-hours, 0 or more, not {hours!r}")
        return proposal["value"]

    @validate("semesters")
    def _semesters(self, proposal: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            parse_semesters(proposal["value"])
        except PeriodError as exc:
            raise AccountingConfigError(str(exc)) from None
        return proposal["value"]

    @validate("budget_grace_seconds")
    def _grace(self, proposal: dict[str, Any]) -> float:
        if not math.isfinite(proposal["value"]) or proposal["value"] < 0:
            raise AccountingConfigError(f"budget_grace_seconds must be a number of seconds, 0 or more, not {proposal['value']!r}")
        return proposal["value"]

    @validate("right_sizing_sessions", "right_sizing_headroom", "right_sizing_small_share", "right_sizing_days")
    def _right_sizing(self, proposal: dict[str, Any]) -> Any:
        name, value = proposal["trait"].name, proposal["value"]
        most = {"right_sizing_sessions": 1000, "right_sizing_headroom": 10.0, "right_sizing_small_share": 1.0, "right_sizing_days": 366.0}[
            name
        ]
        if not (math.isfinite(value) and 0 <= value <= most):
            raise AccountingConfigError(f"{name} must be from 0 to {most:g}, not {value!r}")
        return value

    @validate("flush_seconds")
    def _flush(self, proposal: dict[str, Any]) -> float:
        if not 1.0 <= proposal["value"] <= 3600.0:
            raise AccountingConfigError(f"flush_seconds must be between 1 and 3600, not {proposal['value']!r}")
        return proposal["value"]

    @property
    def has_budgets(self) -> bool:
        return bool(self.user_budgets or self.group_budgets)

    @property
    def stops_over_budget(self) -> bool:
        """Running sessions of users over budget are stopped (not only warned)."""
        return self.enabled and self.has_budgets and self.budget_stop
