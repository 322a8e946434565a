"""One hub's accounting: the ledger in its file, and the budgets read against it."""

from __future__ import annotations

import logging
import os
import weakref
from pathlib import Path
from typing import Any

from traitlets.config import Config

from jupyter_gpuburst.hub.accounting.budgets import Budgets
from jupyter_gpuburst.hub.accounting.ledger import IdleSource, RequestsOf, UsageLedger
from jupyter_gpuburst.hub.accounting.settings import LEDGER_FILE, GPUAccountingSettings
from jupyter_gpuburst.hub.accounting.store import UsageStore

# every ledger of this process, and the idle source they all use (``use_idle_source``)
_ledgers: "weakref.WeakSet[UsageLedger]" = weakref.WeakSet()
_idle_source: IdleSource | None = None


def use_idle_source(source: IdleSource | None) -> None:
    """Count "held idle" in every ledger of this hub process, now and later, from
    ``source(user, server_name, target)`` (docs/accounting.md says how to wire GPU culling's)."""
    global _idle_source
    _idle_source = source
    for ledger in list(_ledgers):
        ledger.idle_source = source


def record_use(user: str, server_name: str, target: str, figures: dict[str, Any]) -> bool:
    """A server's report of what its GPUs (``target`` "server") or one of its GPU kernels' (the
    kernel's record id) used since its previous report, for right-sizing; True when a ledger
    of this hub process counts a session of it."""
    took = False
    for ledger in list(_ledgers):
        try:
            took = ledger.record_use(user, server_name, target, figures) > 0 or took
        except Exception:  # noqa: BLE001 - a figure for right-sizing never fails a report
            ledger.log.warning("Could not keep the GPU use of %s's %r", user, target, exc_info=True)
    return took


def counts_use() -> bool:
    """Whether this hub process keeps what sessions use (servers then measure it even where
    nothing is culled)."""
    return any(True for _ in list(_ledgers))


class Accounting:
    """One per capacity tracker: its ledger, the budgets read against it, and the settings."""

    def __init__(self, settings: GPUAccountingSettings, ledger: UsageLedger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.budgets = Budgets(settings, ledger)

    def set_idle_source(self, source: IdleSource | None) -> None:
        """Count "held idle" from ``source(user, server_name, target)`` (docs/accounting.md)."""
        self.ledger.idle_source = source


def ledger_path(config: Config | None, settings: GPUAccountingSettings) -> str:
    """Where the ledger lives: the configured path, else beside the hub's SQLite database."""
    if settings.ledger_path:
        return settings.ledger_path
    db_url = ""
    if config is not None and "JupyterHub" in config and "db_url" in config.JupyterHub:
        db_url = str(config.JupyterHub.db_url)
    else:
        db_url = "sqlite:///jupyterhub.sqlite"  # JupyterHub's default, in its working directory
    if db_url.startswith("sqlite:///") and db_url != "sqlite:///:memory:":
        return str(Path(db_url.removeprefix("sqlite:///")).parent / LEDGER_FILE)
    return os.path.join(os.getcwd(), LEDGER_FILE)


def from_config(
    config: Config | None, requests_of: RequestsOf, log: logging.Logger | None = None, snapshot: Any = None
) -> Accounting | None:
    """The accounting of a hub with ``config``, or None when it is turned off (or there is no
    hub config: a tracker of a benchmark or a test)."""
    if config is None:
        return None
    settings = GPUAccountingSettings(config=config)
    if not settings.enabled:
        return None
    path = ledger_path(config, settings)
    ledger = UsageLedger(
        UsageStore(path), requests_of, idle_source=_idle_source, flush_seconds=settings.flush_seconds, snapshot=snapshot, log=log
    )
    _ledgers.add(ledger)
    (log or logging.getLogger(__name__)).info("GPU usage is counted in %s", path)
    return Accounting(settings, ledger)
