"""jupyter-gpuburst: GPU notebooks on the local cluster, or on a Liqo-peered donor when it is full."""

from ._version import __version__

__all__ = ["__version__"]
