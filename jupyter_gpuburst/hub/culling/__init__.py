"""GPU idle culling, hub side: the activity API, the signal store, the policy and the culler loop.

Off by default. ``install(c)`` of ``jupyter_gpuburst.hub`` serves the activity API on the
``gpuburst`` service and, where ``c.GPUCullingSettings`` is configured, grants that service the
``delete:servers`` scope the culler stops servers with (docs/culling.md).
"""

from jupyter_gpuburst.hub.culling.culler import TEMPLATE_VAR, Culler
from jupyter_gpuburst.hub.culling.handlers import handlers
from jupyter_gpuburst.hub.culling.live import ROLE_NAME, hub_culler, install, refuses_start, stopped_note
from jupyter_gpuburst.hub.culling.settings import CullPolicy, GPUCullingSettings

__all__ = [
    "ROLE_NAME",
    "TEMPLATE_VAR",
    "Culler",
    "CullPolicy",
    "GPUCullingSettings",
    "handlers",
    "hub_culler",
    "install",
    "refuses_start",
    "stopped_note",
]
