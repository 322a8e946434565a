"""The gpuburst command and the placement benchmark's JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_gpuburst import cli


def test_help_lists_every_subcommand(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.SUBCOMMANDS:
        assert name in out


def test_unknown_command_is_an_error(capsys):
    try:
        cli.main(["fly"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "unknown command 'fly'" in capsys.readouterr().err


def test_bench_placement_prints_the_named_figures():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_gpuburst.cli",
            "bench",
            "placement",
            "--nodes",
            "200",
            "--pods",
            "2000",
            "--outstanding",
            "50",
            "--decisions",
            "200",
            "--events",
            "300",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # exit 1 is a check a run this small cannot pass (its sample counts); a crash prints nothing
    assert proc.returncode in (0, 1) and proc.stdout, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    for key in ("nodes", "pods", "outstanding", "decision_ms", "event_changed_us", "event_noop_us", "memory_mib", "checks"):
        assert key in result
    assert result["nodes"] == 200 and result["pods"] == 2000 and result["gc_enabled"] is True
    assert 0 < result["decision_ms"]["p50"] <= result["decision_ms"]["p99"] <= result["decision_ms"]["max"]
    assert result["placed"] == result["decisions"] == 200
    # the changed events, split by kind, are the same events on both clocks
    by_kind = result["event_changed_by_kind"]
    assert by_kind and set(by_kind) <= {"pod_bound", "pod_finished", "pod_deleted"}
    assert sum(k["wall_us"]["n"] for k in by_kind.values()) == result["event_changed_us"]["n"]
    assert all(k["wall_us"]["n"] == k["cpu_us"]["n"] for k in by_kind.values())
    # the reservations really were outstanding while decisions were timed
    assert result["outstanding_during_decisions"]["min"] >= 50
    checks = result["checks"]
    assert checks["decisions_equal_brute_force"]["ok"] and checks["inventory_equals_recount"]["ok"]
    assert checks["nodes_overcommitted"]["ok"] and checks["every_decision_placed"]["ok"]
    # 200 decisions are fewer than a tail needs: that check fails, and so does the run
    assert checks["decision_samples"]["ok"] is False
    assert result["ok"] is False and proc.returncode == 1


def test_bench_rejects_bad_sizes():
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "bench", "placement", "--nodes", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--nodes must be at least 1" in proc.stderr


def test_bench_without_its_dependencies_says_which_extra(monkeypatch, capsys):
    import importlib

    from jupyter_gpuburst import bench

    def missing(name):
        raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")

    monkeypatch.setattr(importlib, "import_module", missing)
    assert bench.main(["telemetry", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("gpuburst bench telemetry: needs aiohttp, which the 'bench' extra brings: pip install 'jupyter-gpuburst[bench]'")
    assert "Traceback" not in err


def test_bench_does_not_hide_a_module_of_its_own_gone_missing(monkeypatch):
    import importlib

    from jupyter_gpuburst import bench

    def broken(name):
        raise ModuleNotFoundError("No module named 'jupyter_gpuburst.bench.stats'", name="jupyter_gpuburst.bench.stats")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError):
        bench.main(["telemetry"])


def test_a_command_without_its_extra_says_which_and_its_own_modules_still_raise(monkeypatch, capsys):
    import importlib

    from jupyter_gpuburst import cli

    def missing(name):
        raise ModuleNotFoundError("No module named 'jsonpatch'", name="jsonpatch")

    monkeypatch.setattr(importlib, "import_module", missing)
    assert cli.main(["sim"]) == 2
    assert capsys.readouterr().err.strip() == "gpuburst sim needs jsonpatch: pip install 'jupyter-gpuburst[demo]'"

    def broken(name):
        raise ModuleNotFoundError("No module named 'jupyter_gpuburst.sim.store'", name="jupyter_gpuburst.sim.store")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["sim"])
