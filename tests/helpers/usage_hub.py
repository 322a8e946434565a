"""A hub whose capacity is ``fakes.StaticTracker`` with two hours of GPU use in its ledger: its config."""

from __future__ import annotations

from helpers.static_hub import HELPERS

# alice holds 2 GPUs on the origin and bob 3 on donor-1 for two hours; carol's pod never binds
CONFIG = f"""
import os, sys
sys.path.insert(0, {str(HELPERS)!r})
from fakes import StaticTracker, pods
from jupyter_gpuburst.hub import install
from jupyter_gpuburst.hub.accounting import from_config
from jupyter_gpuburst.hub.accounting.counters import USAGE

c.GPUAccountingSettings.ledger_path = os.path.join(os.getcwd(), "usage.sqlite")
c.GPUAccountingSettings.user_budgets = {{"*": 20.0, "bob": 5.0}}
c.GPUAccountingSettings.semesters = [{{"name": "Fall 2026", "start": "2026-09-01", "end": "2027-01-31"}}]
now = [1795000000.0 - (1795000000.0 % 86400) + 3 * 3600.0]  # a Wednesday 03:00 UTC
tracker = StaticTracker()
tracker.accounting = from_config(c, tracker.inventory.pod_requests)
tracker.accounting.ledger.clock = lambda: now[0]
for pod in pods():
    if pod["metadata"]["name"].startswith("jupyter-"):
        pending = {{**pod, "spec": {{k: v for k, v in pod["spec"].items() if k != "nodeName"}}}}
        tracker.accounting.ledger.pod_event("ADDED", pod["metadata"]["name"], pending)
        if pod["status"]["phase"] == "Running":
            tracker.accounting.ledger.pod_event("MODIFIED", pod["metadata"]["name"], pod)
tracker.accounting.ledger.snapshot = tracker.snapshot
tracker.accounting.ledger.sample()
now[0] += 2 * 3600.0
tracker.accounting.ledger.sample()
USAGE.add(tracker.accounting)
install(c, tracker_source=lambda: tracker)
"""
