"""The configuration reference in docs/configuration.md, generated from the traits themselves.

    python -m jupyter_gpuburst.docs_traits            # print the Markdown
    python -m jupyter_gpuburst.docs_traits --write docs/configuration.md
    python -m jupyter_gpuburst.docs_traits --check docs/configuration.md   # exit 1 when stale

Only traits defined by this package are listed (KubeSpawner's own are documented upstream).
The Markdown replaces whatever sits between the BEGIN/END markers in the target file.

Each trait also gets where it goes in z2jh's values (``hub.config.<Class>.<trait>`` for plain
data, which z2jh hands to the hub's config as it is; ``hub.extraConfig`` for a Python value such
as a callable; ``singleuser.extraFiles`` for the user's server) and whether a server profile may
set it for its own servers, as the hub enforces it (``hub.profiles.policy``, the culler's
per-profile overrides).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from traitlets import Bool, Dict, Enum, Float, HasTraits, Int, List, TraitType, Unicode, Union

BEGIN = "<!-- BEGIN GENERATED CONFIG REFERENCE (python -m jupyter_gpuburst.docs_traits --write docs/configuration.md) -->"
END = "<!-- END GENERATED CONFIG REFERENCE -->"
PACKAGE = "jupyter_gpuburst"


def _sections() -> list[tuple[str, str, type[HasTraits]]]:
    """(config section, what it configures, class) for every configurable class we ship."""
    from jupyter_gpuburst.hub.accounting.settings import GPUAccountingSettings
    from jupyter_gpuburst.hub.address import HubAddress
    from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
    from jupyter_gpuburst.hub.labs.settings import LabSettings
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
            "LabSettings",
            "the hub: teachers' lab bookings, their limits and approval (`jupyterhub_config.py`; docs/labs.md)",
            LabSettings,
        ),
        (
            "HubAddress",
            "the hub: its address in the user namespace, by which servers on every site reach it (`jupyterhub_config.py`; docs/donors.md)",
            HubAddress,
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


# trait types whose values z2jh's hub.config carries as YAML (anything else is Python code)
PLAIN = (Bool, Dict, Enum, Float, Int, List, Unicode)
SERVER_PACKAGE = f"{PACKAGE}.server"
NOT_PER_PROFILE = "no"


def helm_path(section: str, cls: type[HasTraits], name: str, trait: TraitType) -> str:
    """Where the trait goes in z2jh's values."""
    if cls.__module__.startswith(SERVER_PACKAGE):
        return "`singleuser.extraFiles`"
    if _plain(trait):
        return f"`hub.config.{section}.{name}`"
    return "`hub.extraConfig`"


def _plain(trait: TraitType) -> bool:
    if isinstance(trait, Union):
        return all(_plain(member) for member in trait.trait_types)
    return isinstance(trait, PLAIN)


def per_profile(section: str, name: str) -> str:
    """How a server profile may set the trait for its servers, or "no"."""
    from jupyter_gpuburst.hub.culling.settings import OVERRIDES
    from jupyter_gpuburst.hub.profiles.policy import HUB_WIDE_TRAITS
    from jupyter_gpuburst.hub.settings import SPAWNER_SECTION

    if section == SPAWNER_SECTION:
        return f"{NOT_PER_PROFILE}: {HUB_WIDE_TRAITS[name]}" if name in HUB_WIDE_TRAITS else "`kubespawner_override`"
    if section == "GPUCullingSettings" and name in OVERRIDES:
        return "`server_profiles`, `kernel_profiles`"
    return NOT_PER_PROFILE


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
        lines += [
            f"#### `{section}`: {what}",
            "",
            "| Option | Type | Default | Helm (z2jh values) | Per profile | Description |",
            "|---|---|---|---|---|---|",
        ]
        for name, trait in sorted(own_traits(cls).items()):
            cells = [
                f"`c.{section}.{name}`",
                _type_name(trait),
                f"`{_default(cls, name, trait)}`",
                helm_path(section, cls, name, trait),
                per_profile(section, name),
                _help(trait),
            ]
            lines.append(f"| {' | '.join(cells)} |")
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
