"""``GET /api/gpuburst/kernels``: where each of this server's GPU kernels runs (for the panel).

Site, node, GPU, state and the kernel's own GPU figures (memory, utilization, as its pod
measures them; see ``kernel_usage``) per kernel, from the provisioners; never an address or a
key. It names kernels, so it needs ``read`` on ``kernels`` like jupyter_server's own kernel list,
and reading it is not user activity (an open panel must not keep a server from being culled).
"""

from __future__ import annotations

import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_gpuburst.server.kernel_usage import KernelUsageCache
from jupyter_gpuburst.server.provisioner import remote_kernels

USAGE_SETTING = "gpuburst_kernel_usage"


class GPUKernelsHandler(APIHandler):
    auth_resource = "kernels"
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self) -> None:
        kernels = remote_kernels(self.kernel_manager)
        cache = self.settings.setdefault(USAGE_SETTING, KernelUsageCache())
        running = [k["kernel_id"] for k in kernels if k.get("state") == "running"]
        figures = await cache.figures(self.kernel_manager, running)
        for kernel in kernels:
            kernel["gpu"] = figures.get(kernel["kernel_id"])
        self.finish(json.dumps({"kernels": kernels}))
