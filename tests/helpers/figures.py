"""Figures the `gpu` tier measures, gathered in one JSON file (``$GPUBURST_GPU_FIGURES``) for
benchmarks/README.md: each test adds its own key; without the variable they are only printed."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

FIGURES_ENV = "GPUBURST_GPU_FIGURES"


def record(name: str, value: Any) -> None:
    """Print ``{name: value}`` and add it to the figures file, if one is named (tests running in
    parallel each hold the file's lock while they add theirs)."""
    print(json.dumps({name: value}), flush=True)
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(target.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            figures = json.loads(target.read_text())
        except (OSError, ValueError):
            figures = {}
        figures[name] = value
        target.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
