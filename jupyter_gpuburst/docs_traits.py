"""The configuration reference in docs/configuration.md, generated from the traits themselves.

    python -m jupyter_gpuburst.docs_traits            # print the Markdown
    python -m jupyter_gpuburst.docs_traits --write docs/configuration.md
    python -m jupyter_gpuburst.docs_traits --check docs/configuration.md   # exit 1 when stale

Only traits defined by this package are listed (KubeSpawner's own are documented upstream).
The Markdown replaces whatever sits between the BEGIN/END markers in the target file.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from traitlets import HasTraits, TraitType

BEGIN = "<!-- BEGIN GENERATED CONFIG REFERENCE (python -m jupyter_gpuburst.docs_traits --write docs/configuration.md) -->"
END = "<!-- END GENERATED CONFIG REFERENCE -->"
PACKAGE = "jupyter_gpuburst"


def _sections() -> list[tuple[str, str, type[HasTraits]]]:
    """(config section, what it configures, class) for every configurable class we ship."""
    from jupyter_gpuburst.hub.accounting.settings import GPUAccountingSettings
    from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
    from jupyter_gpuburst.hub.pools.settings import WarmPools
    from jupyter_gpuburst.hub.service import GPUBurstService
    from jupyter_gpuburst.hub.spawner import GPUBurstSpawner
    from jupyter_gpuburst.server.app import GPUBurstServerExtension
    from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner

    return [
        ("GPUBurstSpawner", "the hub: placement policy and spawner behaviour (`jupyterhub_config.py`)", GPUBurstSpawner),
        ("GPUKernelSettings", "the hub: GPU kernels (kernel mode; `jupyterhub_config.py`)", GPUKernelSettings),
        (
            "GPUCullingSettings",
            "the hub: GPU idle culling of servers and GPU kernels (`jupyterhub_config.py`; docs/culling.md)",
            GPUCullingSettings,
        ),
        (
            "GPUAccountingSettings",
            "the hub: GPU-hours accounting and budgets (`jupyterhub_config.py`; docs/accounting.md)",
            GPUAccountingSettings,
        ),
        (
            "WarmPools",
            "the hub: warm pools of placeholder pods per site and profile (`jupyterhub_config.py`; docs/warm-pools.md)",
            WarmPools,
        ),
        (
            "GPUBurstService",
            "the hub: the `gpuburst` service's own HTTP server (`jupyterhub_config.py`; docs/security.md)",
            GPUBurstService,
        ),
        (
            "GPUBurstServerExtension",
            "the user's server: GPU telemetry (`jupyter_server_config.py`, or `--GPUBurstServerExtension.<name>=` in the single-user command)",
            GPUBurstServerExtension,
        ),
        (
            "GPUBurstProvisioner",
            "the user's server: how it waits for the hub's GPU kernels (`jupyter_server_config.py`; `profile` is set by each generated kernelspec)",
            GPUBurstProvisioner,
        ),
    ]


def own_traits(cls: type[HasTraits]) -> dict[str, TraitType]:
    """Configurable traits that a class of this package defines (in MRO order, most derived last)."""
    out: dict[str, TraitType] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith(PACKAGE) or not issubclass(klass, HasTraits):
            continue
        for name, trait in klass.class_own_traits(config=True).items():
            out[name] = trait
    return out


def _type_name(trait: TraitType) -> str:
    name = type(trait).__name__
    if trait.allow_none:
        name += " or None"
    return name


def _default(cls: type[HasTraits], name: str, trait: TraitType) -> str:
    # a @default method (the environment, another trait) decides at run time: its help says how
    if name in getattr(cls, "_trait_default_generators", {}):
        return "(dynamic)"
    try:
        value = trait.default_value_repr()
    except Exception:  # noqa: BLE001 - some dynamic defaults cannot be shown statically
        return "(dynamic)"
    if value in ("traitlets.Undefined", "<Undefined>"):
        return "(dynamic)"
    return value


def _help(trait: TraitType) -> str:
    text = inspect.cleandoc(trait.help or "").strip()
    if not text:
        raise ValueError(f"trait {trait.name!r} has no help string; every configurable trait needs one")
    return re.sub(r"\s+", " ", text).replace("|", "\\|")


def render(sections: Iterable[tuple[str, str, type[HasTraits]]] | None = None) -> str:
    lines: list[str] = []
    for section, what, cls in sections if sections is not None else _sections():
        lines += [f"#### `{section}`: {what}", "", "| Option | Type | Default | Description |", "|---|---|---|---|"]
        for name, trait in sorted(own_traits(cls).items()):
            lines.append(f"| `c.{section}.{name}` | {_type_name(trait)} | `{_default(cls, name, trait)}` | {_help(trait)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def splice(document: str, generated: str) -> str:
    """``document`` with the text between the markers replaced by ``generated``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"markers not found; the file needs a line {BEGIN!r} and a later line {END!r}")
    return document[: start + len(BEGIN)] + "\n\n" + generated + "\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_gpuburst.docs_traits", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="FILE", help="replace the generated section of FILE")
    group.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE's generated section is stale")
    args = parser.parse_args(argv)
    generated = render()
    if args.write is None and args.check is None:
        sys.stdout.write(generated)
        return 0
    path = args.write or args.check
    current = path.read_text()
    updated = splice(current, generated)
    if args.check is not None:
        if updated != current:
            print(
                f"{path}: the configuration reference is stale; run python -m jupyter_gpuburst.docs_traits --write {path}", file=sys.stderr
            )
            return 1
        return 0
    path.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
