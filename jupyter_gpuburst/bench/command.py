"""`gpuburst bench NAME`: runs one benchmark by name; each prints one JSON object (see benchmarks/README.md)."""

from __future__ import annotations

import importlib
import sys

from jupyter_gpuburst.cli import missing_package

BENCHMARKS = {
    "placement": "jupyter_gpuburst.bench.placement",
    "telemetry": "jupyter_gpuburst.bench.telemetry",
    "spawn": "jupyter_gpuburst.bench.spawn",
    "redirect": "jupyter_gpuburst.bench.redirect",
    "chaos": "jupyter_gpuburst.bench.chaos",
    "trace": "jupyter_gpuburst.bench.trace",
    "kernels": "jupyter_gpuburst.bench.kernels",
    "culling": "jupyter_gpuburst.bench.culling",
    "rush": "jupyter_gpuburst.bench.rush",
    "hub-memory": "jupyter_gpuburst.bench.hub_memory",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: gpuburst bench {" + ",".join(BENCHMARKS) + "} [options] --json")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"gpuburst bench: unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(BENCHMARKS[name])
    except ModuleNotFoundError as exc:
        if exc.name == BENCHMARKS[name]:
            print(f"gpuburst bench {name}: not available in this build", file=sys.stderr)
            return 2
        package = missing_package(exc)
        if package is None:
            raise
        # a dependency of the benchmarks that a plain install leaves out
        print(
            f"gpuburst bench {name}: needs {package}, which the 'bench' extra brings: pip install 'jupyter-gpuburst[bench]'",
            file=sys.stderr,
        )
        return 2
    # Ctrl-C, and SIGTERM through bench/stopping.py, unwind the benchmark: what it started stops
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        print(f"gpuburst bench {name}: stopped; what it started has been stopped too", file=sys.stderr)
        return 130
