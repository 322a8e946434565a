"""`gpuburst bench NAME`: benchmarks that print one JSON object each (see benchmarks/README.md)."""

from jupyter_gpuburst.bench.command import BENCHMARKS, main

__all__ = ["BENCHMARKS", "main"]
