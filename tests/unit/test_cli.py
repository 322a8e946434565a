"""The gpuburst command and the placement benchmark's JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys

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
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "bench", "placement", "--nodes", "200", "--pods", "2000",
         "--decisions", "200", "--events", "500", "--json"],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout
    result = json.loads(out)
    for key in ("nodes", "pods", "decision_p50_ms", "decision_p99_ms", "event_apply_p99_us", "full_recount_ms"):
        assert key in result
    assert result["nodes"] == 200 and result["pods"] == 2000
    assert 0 < result["decision_p50_ms"] <= result["decision_p99_ms"]
    assert result["placed"] > 0


def test_bench_rejects_bad_sizes():
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_gpuburst.cli", "bench", "placement", "--nodes", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and "--nodes must be at least 1" in proc.stderr
