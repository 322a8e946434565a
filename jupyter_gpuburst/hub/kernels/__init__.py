"""Remote GPU kernels, hub side: the kernel-placement API, kernel pods and their reaper.

The API is part of the ``gpuburst`` JupyterHub service (``jupyter_gpuburst.hub.install(c)``
registers it), at ``/services/gpuburst/api/kernels``. A user's server reaches it directly at the
URL the spawner puts in ``$JUPYTER_GPUBURST_KERNELS_URL``, with its own token; ``scopes`` says
which scopes that token needs and how to grant them.
"""

from jupyter_gpuburst.core.keys import KERNELS_URL_ENV
from jupyter_gpuburst.hub.kernels.handlers import API_PATH, SCOPE, handlers
from jupyter_gpuburst.hub.kernels.scopes import install, server_token_scopes

__all__ = ["API_PATH", "KERNELS_URL_ENV", "SCOPE", "handlers", "install", "server_token_scopes"]
