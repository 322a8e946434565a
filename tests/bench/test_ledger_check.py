"""The chaos benchmark's accounting check fails when the ledger and the pods' real lives disagree."""

from __future__ import annotations

import time

from jupyter_gpuburst.bench.ledger_check import TOLERANCE_S, PodLifetimes, compare
from jupyter_gpuburst.hub.accounting.store import Session, UsageStore


def session(uid: str, started: float, until: float, ended: float | None) -> Session:
    return Session(uid, f"jhub/{uid}", f"{uid}/", uid, (), "gpu", "origin", "nvidia.com/gpu", 1, "server", started, started, None)


def lifetimes(pods: dict) -> PodLifetimes:
    found = PodLifetimes(None, "jhub")
    found.pods = pods
    return found


def test_agreeing_ledger_passes_and_one_off_by_more_than_the_tolerance_fails(tmp_path):
    now = time.time()
    store = UsageStore(tmp_path / "gpuburst-usage.sqlite")
    done, running = session("done", now - 100, now - 40, now - 40), session("running", now - 30, now, None)
    store.save([done, running], [(done, now - 40, None, now - 40), (running, now - 10, None, None)], alive_until=now)
    real = {
        "done": {"name": "p-done", "count": 1, "bound": now - 100, "ended": now - 40},
        "running": {"name": "p-running", "count": 1, "bound": now - 30, "ended": None},
    }
    result = compare(lifetimes(real), tmp_path / "gpuburst-usage.sqlite")
    assert result["off_by_more"] == 0 and result["worst_error_s"] < 0.5, result
    # the pod really lived 0.2 s longer than the tolerance allows
    real["done"]["ended"] = now - 40 + TOLERANCE_S + 0.2
    assert TOLERANCE_S <= 5  # the bound docs/accounting.md states
    real["gone"] = {"name": "p-gone", "count": 1, "bound": now - 20, "ended": now - 5}  # never counted
    result = compare(lifetimes(real), tmp_path / "gpuburst-usage.sqlite")
    assert result["off_by_more"] == 2 and result["missing"] == 1, result
