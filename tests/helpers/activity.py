"""Stand-ins for a server's GPU sampler and kernel manager, as the activity reporter reads them."""

from __future__ import annotations


class Sampler:
    def __init__(self, gpus):
        self.gpus = gpus

    async def current(self):
        class S:
            data = {"available": bool(self.gpus), "gpus": self.gpus}

        return S()


class Kernels:
    def __init__(self, states):
        self.kernels = {k: type("K", (), {"execution_state": s})() for k, s in states.items()}

    def list_kernel_ids(self):
        return list(self.kernels)

    def get_kernel(self, kernel_id):
        return self.kernels[kernel_id]
