"""A user's server's REST API through the hub's proxy, with the test's admin token."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def server_api(hub, user: str, method: str, path: str, body: Any = None, timeout: float = 60) -> tuple[int, Any]:
    """``method`` on ``/user/<user>/api<path>``: (status, the JSON reply or None)."""
    url = f"{hub.url}/user/{user}/api{path}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        async with http.request(method, url, json=body, headers={"Authorization": f"token {hub.token}"}) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text else None)
