"""``GET /api/gpuburst/kernels``: where each of this server's GPU kernels runs (for the panel).

Site, node, GPU and state per kernel, from the provisioners; never an address or a key. It
names kernels, so it needs ``read`` on ``kernels`` like jupyter_server's own kernel list, and
reading it is not user activity (an open panel must not keep a server from being culled).
"""

from __future__ import annotations

import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_gpuburst.server.provisioner import remote_kernels


class GPUKernelsHandler(APIHandler):
    auth_resource = "kernels"
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps({"kernels": remote_kernels(self.kernel_manager)}))
