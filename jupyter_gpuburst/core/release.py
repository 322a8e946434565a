"""A release as the label value the hub writes on server and kernel pods (callers pass
``jupyter_gpuburst.__version__``: core imports nothing of the package around it)."""

from __future__ import annotations

import re

# a label value: at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]")


def label_value(version: str) -> str:
    """``version`` as a label value: a local version's ``+`` (0.2.0+g1a2b3c) becomes ``-``."""
    return _NOT_ALLOWED.sub("-", version)[:63].strip("-._") or "unknown"
