"""A ledger written by release 0.2.0 is upgraded in place when the hub starts: its sessions,
charges and samples stay, and right-sizing's figures are kept from then on."""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers.ledger import DAY0, Clock, ledger_at, pod, seconds

from jupyter_gpuburst.hub.accounting.store import SCHEMA_VERSION, UsageStore

GIB = 2**30

# the ledger's tables as release 0.2.0 created them (jupyter_gpuburst/hub/accounting/store.py)
SCHEMA_0_2_0 = """
CREATE TABLE IF NOT EXISTS sessions (
    uid TEXT PRIMARY KEY, pod TEXT NOT NULL, key TEXT NOT NULL, user TEXT NOT NULL, groups TEXT NOT NULL,
    profile TEXT NOT NULL, site TEXT NOT NULL, resource TEXT NOT NULL, count INTEGER NOT NULL, mode TEXT NOT NULL,
    started REAL NOT NULL, counted_until REAL NOT NULL, ended REAL
);
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (ended);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user);
CREATE TABLE IF NOT EXISTS charges (
    uid TEXT NOT NULL, day TEXT NOT NULL, gpu_seconds REAL NOT NULL, idle_seconds REAL NOT NULL, PRIMARY KEY (uid, day)
);
CREATE INDEX IF NOT EXISTS charges_day ON charges (day);
CREATE TABLE IF NOT EXISTS site_samples (
    t REAL NOT NULL, site TEXT NOT NULL, resource TEXT NOT NULL, total INTEGER NOT NULL, in_use INTEGER NOT NULL, reserved INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS site_samples_t ON site_samples (t);
CREATE TABLE IF NOT EXISTS hub (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS grants (who TEXT NOT NULL, period TEXT NOT NULL, hours REAL NOT NULL, granted_by TEXT NOT NULL, granted_at REAL NOT NULL);
"""


def ledger_of_0_2_0(path) -> None:
    """alice's finished hour on one GPU, bob's server still open (counted 10 minutes), a sample."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_0_2_0)
    groups = json.dumps(["students"])
    db.execute(
        "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("uid-a", "jhub/a", "alice/", "alice", groups, "gpu", "origin", "nvidia.com/gpu", 1, "server", DAY0, DAY0 + 3600, DAY0 + 3600),
    )
    db.execute(
        "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("uid-b", "jhub/b", "bob/", "bob", groups, "gpu", "origin", "nvidia.com/gpu", 1, "server", DAY0, DAY0 + 600, None),
    )
    db.execute("INSERT INTO charges VALUES (?,?,?,?)", ("uid-a", "2026-11-18", 3600.0, 0.0))
    db.execute("INSERT INTO charges VALUES (?,?,?,?)", ("uid-b", "2026-11-18", 600.0, 0.0))
    db.execute("INSERT INTO site_samples VALUES (?,?,?,?,?,?)", (DAY0, "origin", "nvidia.com/gpu", 4, 2, 0))
    db.execute("INSERT INTO hub VALUES ('alive_until', ?)", (DAY0 + 600,))
    db.commit()
    db.close()


def test_a_0_2_0_ledger_is_upgraded_in_place_and_keeps_its_figures(tmp_path):
    path = tmp_path / "gpuburst-usage.sqlite"
    ledger_of_0_2_0(path)
    clock = Clock(DAY0 + 900)
    ledger = ledger_at(path, clock)
    columns = {row[1] for row in ledger.store.db.execute("PRAGMA table_info(sessions)")}
    assert {"peak_memory_bytes", "memory_total_bytes", "peak_utilization", "utilization_sum", "utilization_samples"} <= columns
    assert ledger.store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # nothing lost: alice's hour and bob's 10 minutes, the chart's sample (idle not known then)
    assert seconds(ledger, user="alice") == pytest.approx(3600.0)
    assert seconds(ledger, user="bob") == pytest.approx(600.0)
    assert ledger.store.samples(0) == [(DAY0, "origin", "nvidia.com/gpu", 4, 2, 0, None)]
    # bob's open server is resumed where 0.2.0 counted it, and now keeps what it uses
    bob = pod("b", user="bob", uid="uid-b")
    ledger.pod_event("ADDED", "jhub/b", bob)
    ledger.loaded()
    assert ledger.record_use("bob", "", "server", {"peak_memory_bytes": 5 * GIB, "memory_total_bytes": 40 * GIB}) == 1
    clock.t += 300
    ledger.pod_event("DELETED", "jhub/b", None)
    ledger.write()
    ledger.store.close()

    # the upgraded file opens again as it is, with bob's figures on his session
    again = UsageStore(path)
    [measured] = again.measured_sessions(user="bob")
    assert measured.uid == "uid-b" and measured.use.peak_memory_bytes == 5 * GIB
    assert again.measured_sessions(user="alice") == []  # 0.2.0 did not measure: not known, not 0
    assert sum(r["gpu_seconds"] for r in again.usage_rows("2000-01-01", "2100-01-01", user="bob")) == pytest.approx(1200.0)


def test_a_ledger_of_a_newer_release_is_refused_not_damaged(tmp_path):
    path = tmp_path / "gpuburst-usage.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(RuntimeError, match="newer jupyter-gpuburst"):
        UsageStore(path)


def test_use_figures_fold_across_reports_and_survive_a_restart(tmp_path):
    path = tmp_path / "u.sqlite"
    clock = Clock(DAY0 + 100)
    ledger = ledger_at(path, clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p", count=2))
    ledger.pod_event("ADDED", "jhub/k", pod("k", kernel="rec-1"))
    first = {
        "peak_memory_bytes": 6 * GIB,
        "memory_total_bytes": 80 * GIB,
        "peak_utilization": 0.5,
        "utilization_sum": 1.0,
        "utilization_samples": 4,
    }
    assert ledger.record_use("alice", "", "server", first) == 1
    # a later report: a lower peak does not lower it; the mean is over all samples
    later = {
        "peak_memory_bytes": 2 * GIB,
        "memory_total_bytes": 80 * GIB,
        "peak_utilization": 0.9,
        "utilization_sum": 2.0,
        "utilization_samples": 8,
    }
    assert ledger.record_use("alice", "", "server", later) == 1
    # the GPU kernel's figures are its own session's; another user's report touches nothing
    assert ledger.record_use("alice", "", "rec-1", {"peak_memory_bytes": 1 * GIB}) == 1
    assert ledger.record_use("mallory", "", "server", first) == 0
    clock.t += 60
    ledger.flush()
    ledger.store.close()

    restarted = ledger_at(path, clock)
    server = next(s for s in restarted.measured_sessions(user="alice") if s.mode == "server")
    assert server.use.peak_memory_bytes == 6 * GIB and server.use.peak_utilization == 0.9
    assert server.use.mean_utilization == pytest.approx(0.25)
    # a whole GPU's memory, as the 2-GPU server measured it, for profiles nobody configured
    assert restarted.unit_memory("nvidia.com/gpu") == 40 * GIB
    assert restarted.unit_memory("nvidia.com/mig-1g.10gb") is None
    rows = restarted.usage_rows("2000-01-01", "2100-01-01", user="alice")
    assert {r["mode"]: r["peak_memory_bytes"] for r in rows} == {"server": 6 * GIB, "kernel": 1 * GIB}


def _layout(path) -> dict[str, object]:
    """Every table's columns (name, type, not null, default, key) and the layout number."""
    db = sqlite3.connect(path)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        layout: dict[str, object] = {table: db.execute(f"PRAGMA table_info({table})").fetchall() for table in tables}
        layout["user_version"] = db.execute("PRAGMA user_version").fetchone()[0]
        return layout
    finally:
        db.close()


def test_the_rollback_docs_operating_gives_takes_a_migrated_ledger_back_to_0_2_0(tmp_path):
    """Release 0.2.0 reads and writes its ledger by position: on the migrated layout it fails, so
    docs/operating.md gives the statements that take the ledger back before a rollback."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "operating.md").read_text()
    [statements] = re.findall(r"db\.executescript\('''\n(.*?)'''\)", text, re.S)
    old, migrated = tmp_path / "old.sqlite", tmp_path / "gpuburst-usage.sqlite"
    db = sqlite3.connect(old)
    db.executescript(SCHEMA_0_2_0)
    db.close()
    ledger_of_0_2_0(migrated)
    store = UsageStore(migrated)
    store.db.execute("UPDATE sessions SET peak_memory_bytes = ?, utilization_samples = 3 WHERE uid = 'uid-a'", (GIB,))
    store.close()
    assert _layout(migrated) != _layout(old)

    db = sqlite3.connect(migrated)
    db.executescript(statements)
    assert _layout(migrated) == _layout(old)
    # 0.2.0's own statements work again, and what was counted is still there
    db.execute(
        "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        ("uid-c", "p", "k", "u", "[]", "g", "origin", "r", 1, "server", 0, 0, None),
    )
    db.execute("INSERT INTO site_samples VALUES (?,?,?,?,?,?)", (DAY0, "origin", "nvidia.com/gpu", 4, 2, 0))
    db.commit()
    assert db.execute("SELECT SUM(gpu_seconds) FROM charges").fetchone()[0] == 4200.0
    db.close()
    # upgrading again migrates it again, its sessions kept
    store = UsageStore(migrated)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 3
    store.close()
