"""Run code on a kernel of a user's server through the hub's proxy, as JupyterLab does (websocket)."""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from typing import Any

import aiohttp


def execute_request(code: str, session: str) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "session": session,
            "username": "test",
            "version": "5.3",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "channel": "shell",
        "buffers": [],
    }


async def execute(base_url: str, token: str, kernel_id: str, code: str, timeout: float = 60) -> dict[str, Any]:
    """Run ``code``; returns {"stdout": text, "result": text/plain or None, "error": ename or None}."""
    session = uuid.uuid4().hex
    url = f"{base_url}/api/kernels/{kernel_id}/channels?session_id={session}"
    out: dict[str, Any] = {"stdout": "", "result": None, "error": None}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
        async with http.ws_connect(url, headers={"Authorization": f"token {token}"}) as ws:
            request = execute_request(code, session)
            await ws.send_str(json.dumps(request))
            msg_id = request["header"]["msg_id"]
            idle = replied = False

            async def read() -> None:
                nonlocal idle, replied
                async for raw in ws:
                    if raw.type != aiohttp.WSMsgType.TEXT:
                        continue
                    msg = json.loads(raw.data)
                    if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                        continue
                    kind, content = msg["header"]["msg_type"], msg.get("content") or {}
                    if kind == "stream":
                        out["stdout"] += content.get("text", "")
                    elif kind == "execute_result":
                        out["result"] = (content.get("data") or {}).get("text/plain")
                    elif kind == "error":
                        out["error"] = content.get("ename")
                    elif kind == "execute_reply":
                        replied = True
                    elif kind == "status" and content.get("execution_state") == "idle":
                        idle = True
                    if idle and replied:
                        return

            await asyncio.wait_for(read(), timeout)
    return out
