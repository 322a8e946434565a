"""jupyter-gpuburst: GPU notebooks on the local cluster, or on a Liqo-peered donor when it is full."""

try:
    # written from labextension/package.json's version at build time (pyproject.toml)
    from jupyter_gpuburst._version import __version__
except ImportError:  # a checkout that was never built or installed
    __version__ = "0+unknown"

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict]:
    """The jupyter_server extension (imported lazily: the hub imports this package too)."""
    from jupyter_gpuburst.server import GPUBurstServerExtension

    return [{"module": "jupyter_gpuburst.server", "app": GPUBurstServerExtension}]
