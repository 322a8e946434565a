"""GPU-hours accounting: the ledger fed by the capacity watch, budgets, reports and counters.

docs/accounting.md says what is counted and how; ``GPUAccountingSettings`` holds the knobs.
"""

from jupyter_gpuburst.hub.accounting.budgets import BudgetStatus
from jupyter_gpuburst.hub.accounting.ledger import IdleSource
from jupyter_gpuburst.hub.accounting.settings import AccountingConfigError, GPUAccountingSettings
from jupyter_gpuburst.hub.accounting.wiring import Accounting, counts_use, from_config, ledger_path, record_use, use_idle_source

__all__ = [
    "Accounting",
    "AccountingConfigError",
    "BudgetStatus",
    "GPUAccountingSettings",
    "IdleSource",
    "from_config",
    "counts_use",
    "ledger_path",
    "record_use",
    "use_idle_source",
]
