"""``GET /api/gpuburst/kernels``: where each of this server's GPU kernels runs (for the panel).

Site, node, GPU, state and the kernel's own GPU figures (memory, utilization, as its pod
measures them; see ``usage``) per kernel, from the provisioners; never an address or a
key. It names kernels, so it needs ``read`` on ``kernels`` like jupyter_server's own kernel list,
and reading it is not user activity (an open panel must not keep a server from being culled).
"""

from __future__ import annotations

import asyncio
import json
import time

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_gpuburst.server.kernels.provisioner import KernelPlacementError, client_from_env, remote_kernels
from jupyter_gpuburst.server.kernels.specs import PREFIX
from jupyter_gpuburst.server.kernels.usage import KernelUsageCache

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


class GPUKernelProfilesHandler(APIHandler):
    """``GET /api/gpuburst/kernel-profiles``: the GPU kernels this server may start and how many
    of each could start now (for the launcher), as the hub's kernel API says; kept a few
    seconds, so open launchers in many tabs cost the hub one request per interval."""

    auth_resource = "kernelspecs"
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self) -> None:
        cache = self.settings.setdefault(PROFILES_SETTING, ProfilesCache())
        self.finish(json.dumps(await cache.get()))


PROFILES_SETTING = "gpuburst_kernel_profiles"
PROFILES_TTL_S = 5.0


class ProfilesCache:
    def __init__(self, ttl_s: float = PROFILES_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._at = float("-inf")
        self._value: dict | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> dict:
        async with self._lock:
            if self._value is None or time.monotonic() - self._at >= self.ttl_s:
                self._value = await fetch_profiles_now()
                self._at = time.monotonic()
            return self._value


async def fetch_profiles_now() -> dict:
    """``{"profiles": [{slug, display_name, kernel_name, available}], "budget", "budget_used_up",
    "error", "suggestion", "held", "queues"}``: ``budget`` is the hub's sentence on the user's GPU-hour
    budget ("" without one); ``held``, on the GPUs a lab of another class holds now ("" when none);
    ``queues``, whether a kernel started with none free waits in line (else it is refused)."""
    client = client_from_env()
    if client is None:
        return {"profiles": [], "budget": "", "budget_used_up": False, "error": None}
    try:
        code, data = await client.request("GET", "", timeout=10)
    except KernelPlacementError as exc:
        return {"profiles": [], "budget": "", "budget_used_up": False, "error": str(exc)}
    if code != 200 or not isinstance(data, dict):
        return {"profiles": [], "budget": "", "budget_used_up": False, "error": client.message(code, data)}
    profiles = []
    for p in data.get("profiles") or []:
        if not isinstance(p, dict) or not isinstance(p.get("slug"), str):
            continue
        available = p.get("available") if isinstance(p.get("available"), dict) else None
        profiles.append(
            {
                "slug": p["slug"],
                "kernel_name": f"{PREFIX}{p['slug']}",
                "display_name": str(p.get("display_name") or p["slug"]),
                "available": available,
            }
        )
    reply: dict = {"profiles": profiles, "error": None}
    # the hub's sentence on the user's GPU-hour budget ("" without one), and whether it is used up
    reply["budget"] = data["budget"] if isinstance(data.get("budget"), str) else ""
    reply["budget_used_up"] = bool(reply["budget"] and data.get("budget_used_up") is True)
    # the hub's right-sizing sentence for the launcher ("" when it has none to say)
    reply["suggestion"] = data["suggestion"] if isinstance(data.get("suggestion"), str) else ""
    # what a lab of another class holds now ("4 GPUs are held for the lab ML-101 until 10:30.");
    # a hub of an earlier version does not say
    reply["held"] = data["held"] if isinstance(data.get("held"), str) else ""
    # a hub of an earlier version does not say, and refused a start with none free
    reply["queues"] = data.get("queue_when_full") is True
    return reply
