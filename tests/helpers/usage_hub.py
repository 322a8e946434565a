"""A hub whose capacity is ``fakes.StaticTracker`` with two hours of GPU use in its ledger: its config."""

from __future__ import annotations

import time

from helpers.static_hub import HELPERS
from jupyter_gpuburst.hub.accounting.store import Session, UsageStore, Use

GIB = 2**30
# GPU kernels of a whole GPU and of a 1g.10gb MIG slice: what right-sizing's launcher sentence picks from
SLICE_KERNELS = """
c.GPUKernelSettings.profiles = [
    {"slug": "gpu-1", "display_name": "1 GPU", "resource": "nvidia.com/gpu", "count": 1},
    {"slug": "mig-1g", "display_name": "MIG 1g.10gb", "resource": "nvidia.com/mig-1g.10gb", "count": 1},
]
"""

# alice holds 2 GPUs on the origin and bob 3 on donor-1 for two hours; carol's pod never binds.
# Their servers reported what their GPUs used: alice's 2 GPUs (80 GiB) peaked at 6 GiB, bob's 3
# (120 GiB) at 100 GiB; one measured session is enough for the right-sizing list here.
CONFIG = f"""
import os, sys
sys.path.insert(0, {str(HELPERS)!r})
from fakes import StaticTracker, pods
from jupyter_gpuburst.hub import install
from jupyter_gpuburst.hub.accounting import from_config
from jupyter_gpuburst.hub.accounting.counters import USAGE

c.GPUAccountingSettings.ledger_path = os.path.join(os.getcwd(), "usage.sqlite")
c.GPUAccountingSettings.user_budgets = {{"*": 20.0, "bob": 5.0}}
c.GPUAccountingSettings.right_sizing_sessions = 1
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
GIB = 2**30
tracker.accounting.ledger.record_use("alice", "", "server", {{"peak_memory_bytes": 6 * GIB, "memory_total_bytes": 80 * GIB,
    "peak_utilization": 0.3, "utilization_sum": 0.6, "utilization_samples": 6}})
tracker.accounting.ledger.record_use("bob", "", "server", {{"peak_memory_bytes": 100 * GIB, "memory_total_bytes": 120 * GIB,
    "peak_utilization": 0.97, "utilization_sum": 4.5, "utilization_samples": 6}})
tracker.accounting.ledger.snapshot = tracker.snapshot
# the day before, as an earlier hub sampled it every 15 minutes: busy in the daytime (UTC)
busy = [0, 0, 0, 0, 0, 0, 1, 2, 4, 5, 6, 6, 5, 6, 6, 4, 3, 2, 2, 1, 1, 0, 0, 0]
history = []
for i in range(1, 89):
    t = now[0] - 22 * 3600.0 + (i - 1) * 900.0
    h = int(t // 3600) % 24
    history += [(t, "origin", "nvidia.com/gpu", 6, busy[h], 1 if h in (8, 13) else 0, None),
                (t, "origin", "nvidia.com/mig-1g.10gb", 7, busy[h] // 2, 0, None),
                (t, "donor-1", "nvidia.com/gpu", 8, min(8, max(0, busy[h] - 3) * 2), 0, None)]
tracker.accounting.ledger.store.add_samples(history, keep_after=0)
tracker.accounting.ledger.sample()
now[0] += 2 * 3600.0
tracker.accounting.ledger.sample()
USAGE.add(tracker.accounting)
install(c, tracker_source=lambda: tracker)
"""


def earlier_sessions(path, user: str, count: int) -> None:
    """``count`` finished 2-GPU sessions of ``user`` in the last weeks, each peaking at 5 GiB."""
    store = UsageStore(path)
    now = time.time()
    sessions = []
    for i in range(count):
        started = now - (i + 2) * 86400
        sessions.append(
            Session(
                uid=f"earlier-{i}",
                pod=f"default/jupyter-{user}",
                key=f"{user}/",
                user=user,
                groups=(),
                profile="gpu2",
                site="origin",
                resource="nvidia.com/gpu",
                count=2,
                mode="server",
                started=started,
                counted_until=started,
                use=Use(peak_memory_bytes=5 * GIB, memory_total_bytes=80 * GIB),
            )
        )
    store.save(sessions, [(s, s.started + 3600, None, s.started + 3600) for s in sessions], alive_until=now)
    store.close()
