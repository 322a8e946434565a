"""The `gpuburst` command: one entry point, each subcommand implemented in its own module.

Subcommands are imported lazily so that `gpuburst --help` stays fast and a missing optional
part fails with a clear message instead of an ImportError traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, function, one-line help). Each function takes argv (list[str]) and returns
# an exit code; it owns its own argparse parser so `gpuburst NAME --help` is complete.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("jupyter_gpuburst.demo_cli", "main", "run the local federation + JupyterHub demo"),
    "sim": ("jupyter_gpuburst.sim.cli", "main", "run a local Kubernetes + Liqo federation"),
    "doctor": ("jupyter_gpuburst.doctor.cli", "main", "check a cluster for what the spawner needs"),
    "capacity": ("jupyter_gpuburst.doctor.cli", "capacity_main", "print free/total GPUs per site"),
    "bench": ("jupyter_gpuburst.bench.command", "main", "run a benchmark and print JSON"),
    "uninstall": (
        "jupyter_gpuburst.uninstall",
        "main",
        "remove what the hub made on the origin, in an order that leaves no namespace stuck",
    ),
}


# The extra of the package each subcommand's dependencies come from (pyproject.toml).
EXTRAS = {"demo": "demo", "sim": "demo", "bench": "demo", "doctor": "hub", "capacity": "hub", "uninstall": "hub"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuburst",
        description="jupyter-gpuburst: GPU notebooks locally or on a Liqo-peered donor cluster.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, _func, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def missing_package(exc: ModuleNotFoundError) -> str | None:
    """The package outside this project whose absence made an import fail (its top-level name):
    an extra left out of the install. None when the missing module is one of this project's own:
    a broken install, which must raise rather than be explained away."""
    if exc.name and not exc.name.startswith("jupyter_gpuburst"):
        return exc.name.split(".")[0]
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        parser.error(f"unknown command {name!r}; choose from {', '.join(SUBCOMMANDS)}")
    module_name, func_name, _help = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            print(f"gpuburst {name}: not available in this build ({module_name} is missing)", file=sys.stderr)
            return 2
        package = missing_package(exc)
        if package is None:
            raise
        print(f"gpuburst {name} needs {package}: pip install 'jupyter-gpuburst[{EXTRAS.get(name, 'hub')}]'", file=sys.stderr)
        return 2
    try:
        return int(getattr(module, func_name)(rest) or 0)
    except BrokenPipeError:
        # `gpuburst doctor ... | head`: the reader left, which is not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
