"""A hub whose capacity is a fixed ``fakes.StaticTracker``: its config, for a hub in a child process."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent

STATIC_HUB_CONFIG = f"""
import sys
sys.path.insert(0, {str(HELPERS)!r})
from fakes import StaticTracker
from jupyter_gpuburst.hub import install, metrics

tracker = StaticTracker()
install(c, tracker_source=lambda: tracker)
metrics.add_capacity_source(tracker.snapshot)
# as GPU kernels need: the service may be reached, but the capacity is still the admins'
c.JupyterHub.load_roles.append({{"name": "gpu-kernels", "users": ["kernelstudent"], "scopes": ["access:services!service=gpuburst"]}})
"""
