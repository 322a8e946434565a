"""A package's names imported from its modules on first use, not when the package is imported.

Importing any module of a package runs the package's ``__init__`` first. Where that imported
JupyterHub's app or its services (several CPU seconds), every program that needs one small
module of the package paid for it at each start: ``gpuburst doctor`` took 5-8 s to import what
reads one manifest, and over a minute on a loaded machine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package``: each name in ``names`` is imported from
    the module ``names[name]`` (a name relative to ``package``) the first time it is read."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return attribute
