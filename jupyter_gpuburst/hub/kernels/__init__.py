"""Remote GPU kernels, hub side: the kernel-placement API, kernel pods and their reaper.

The API is part of the ``gpuburst`` JupyterHub service (``jupyter_gpuburst.hub.install(c)``
registers it), at ``/services/gpuburst/api/kernels``. A user's server reaches it directly at the
URL the spawner puts in ``$JUPYTER_GPUBURST_KERNELS_URL``, with its own token; ``scopes`` says
which scopes that token needs and how to grant them.
"""

from jupyter_gpuburst.core import lazy
from jupyter_gpuburst.core.keys import KERNELS_URL_ENV

__all__ = ["API_PATH", "KERNELS_URL_ENV", "SCOPE", "install", "server_token_scopes"]
# the handlers import JupyterHub's service auth: only where the API is served or granted (the
# handlers' list is ``handlers.handlers``: the package's own name is the module's)
__getattr__ = lazy.exports(__name__, {"API_PATH": "handlers", "SCOPE": "handlers", "install": "scopes", "server_token_scopes": "scopes"})
