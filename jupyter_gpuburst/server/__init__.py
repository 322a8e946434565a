"""jupyter_server extension: where this server runs and how its GPUs are used (docs/api.md)."""

from jupyter_gpuburst.server.app import GPUBurstServerExtension

__all__ = ["GPUBurstServerExtension"]
