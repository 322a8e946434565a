"""jupyter_server extension: where this server runs and how its GPUs are used (docs/api.md)."""

from typing import Any

__all__ = ["GPUBurstServerExtension"]


def __getattr__(name: str) -> Any:
    # lazy: a GPU kernel's pod reads its GPUs through jupyter_gpuburst.server.gpu, and must
    # not pay for importing jupyter_server on every kernel start
    if name == "GPUBurstServerExtension":
        from jupyter_gpuburst.server.app import GPUBurstServerExtension

        return GPUBurstServerExtension
    raise AttributeError(name)
