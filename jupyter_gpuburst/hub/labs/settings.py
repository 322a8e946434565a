"""What admins set about lab bookings (``c.LabSettings``), as traitlets."""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, validate
from traitlets.config import Configurable

STORE_FILE = "gpuburst-labs.sqlite"
SCOPE = "custom:gpuburst:labs"
SCOPE_DESCRIPTION = "Book GPU labs for a class (all classes, or those of a !group= filter) on the gpuburst service's labs page."
EVERYONE = "*"


class LabSettings(Configurable):
    """Who may book how much, and how early a booked lab's pools fill."""

    enabled = Bool(True, config=True, help="Offer the labs page (/services/gpuburst/labs) to users granted custom:gpuburst:labs.")
    store_path = Unicode(
        "",
        config=True,
        help=f"""The bookings' SQLite file. Empty (default): {STORE_FILE} beside the hub's SQLite
        database (JupyterHub.db_url), else in the hub's working directory. It must survive hub
        restarts: put it on the hub's persistent volume.""",
    )
    warmup_minutes = Float(
        15.0,
        config=True,
        help="""How long before a lab's start its pools fill (images pull, GPUs are held); these
        minutes count in the booking's GPU-hours.""",
    )
    teacher_weekly_hours = Dict(
        value_trait=Float(),
        config=True,
        help=f"""Username -> GPU-hours a teacher may book per week (Monday to Sunday, in the
        pools' time zone, WarmPools.timezone); "{EVERYONE}" is every teacher's unless named.
        Unset: no limit.""",
    )
    group_weekly_hours = Dict(
        value_trait=Float(),
        config=True,
        help=f"""Group name -> GPU-hours that may be booked for the group's labs per week, by all
        its teachers together; "{EVERYONE}" is every group's unless named. Unset: no limit.""",
    )
    require_approval = Bool(
        False,
        config=True,
        help="""Whether a booking waits for an admin's approval (on the labs page) before its
        pools fill and its class goes first; its GPUs are held against other bookings meanwhile.""",
    )
    group_profiles = Dict(
        value_trait=List(Unicode()),
        config=True,
        help="""Group name -> the GPU server profile slugs its labs may book; a group not named
        may book any GPU profile. Example: {"ml-101": ["gpu1"]}.""",
    )
    group_kernel_profiles = Dict(
        value_trait=List(Unicode()),
        config=True,
        help="""Group name -> the GPU kernel profile slugs (GPUKernelSettings) its labs in
        kernel mode may book; a group not named may book any. Example: {"ml-101": ["gpu-1"]}.""",
    )
    max_students = Int(1000, config=True, help="The most students one booking may expect.")
    max_weeks = Int(26, config=True, help="The most weeks a weekly booking may repeat.")

    @validate("teacher_weekly_hours", "group_weekly_hours")
    def _check_hours(self, proposal: Any) -> dict:
        for who, hours in proposal["value"].items():
            if hours < 0:
                raise TraitError(f"LabSettings.{proposal['trait'].name}[{who!r}]: GPU-hours must be >= 0, got {hours}")
        return proposal["value"]

    def weekly_limit(self, table: dict[str, float], who: str) -> float | None:
        return table.get(who, table.get(EVERYONE))
