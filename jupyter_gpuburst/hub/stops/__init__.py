"""Admins stop servers and GPU kernels from the capacity page (``api/stop``)."""

from jupyter_gpuburst.hub.stops.handlers import STOP_PATH, STOP_SCOPE, handlers

__all__ = ["STOP_PATH", "STOP_SCOPE", "handlers"]
