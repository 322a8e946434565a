"""What tests that count leftover processes share."""

from __future__ import annotations

import psutil


def alive(p: psutil.Process) -> bool:
    """Running, and still the process found (psutil compares its start time), not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
