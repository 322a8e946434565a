"""Authorizers for the tests: deny the gpuburst resource, or deny only the kernels resource."""

from __future__ import annotations

from jupyter_server.auth import Authorizer


class DenyGPUBurst(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return resource != "gpuburst"


class DenyKernels(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return resource != "kernels"
