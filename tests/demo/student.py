"""A student's browser, reduced to HTTP: login form, spawn form, the proxy, the kernel API."""

from __future__ import annotations

import asyncio
import html
import html.parser
import json
import time
import uuid
from typing import Any

import aiohttp


class _FormInputs(html.parser.HTMLParser):
    """Collects <input name=... value=...> of a page (enough for _xsrf and profile radios)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[dict[str, str]] = []
        self.actions: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "input":
            self.inputs.append({k: v or "" for k, v in attrs})
        elif tag == "form":
            self.actions.append(dict(attrs).get("action") or "")


def form_inputs(page: str) -> list[dict[str, str]]:
    parser = _FormInputs()
    parser.feed(page)
    return parser.inputs


def form_action(page: str) -> str:
    parser = _FormInputs()
    parser.feed(page)
    assert parser.actions, "no form in the page"
    return html.unescape(parser.actions[0])


def xsrf_of(page: str) -> str:
    for field in form_inputs(page):
        if field.get("name") == "_xsrf":
            return field["value"]
    raise AssertionError("no _xsrf field in the page")


class Student:
    """One user with their own cookie jar, as one browser profile."""

    def __init__(self, base_url: str, name: str, password: str) -> None:
        self.base = base_url.rstrip("/")
        self.name = name
        self.password = password
        # unsafe=True: keep cookies for an IP address host (127.0.0.1)
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), timeout=aiohttp.ClientTimeout(total=60))

    async def close(self) -> None:
        await self.session.close()

    def _cookie(self, name: str, path_prefix: str) -> str | None:
        for cookie in self.session.cookie_jar:
            if cookie.key == name and (cookie["path"] or "/").startswith(path_prefix):
                return cookie.value
        return None

    async def login(self) -> None:
        async with self.session.get(f"{self.base}/hub/login") as resp:
            assert resp.status == 200, resp.status
            xsrf = xsrf_of(await resp.text())
        form = {"username": self.name, "password": self.password, "_xsrf": xsrf}
        async with self.session.post(f"{self.base}/hub/login", data=form, allow_redirects=False) as resp:
            assert resp.status == 302, (resp.status, await resp.text())

    async def spawn_form_profiles(self) -> list[str]:
        async with self.session.get(f"{self.base}/hub/spawn/{self.name}") as resp:
            assert resp.status == 200, resp.status
            page = await resp.text()
        self._spawn_page = page
        return [f["value"] for f in form_inputs(page) if f.get("name") == "profile"]

    async def start(self, profile: str) -> str:
        """Submit the spawn form with ``profile``; returns where the hub sent us."""
        # The spawn form carries its xsrf token in its action URL, as the browser submits it.
        action = form_action(self._spawn_page)
        assert "_xsrf=" in action, action
        async with self.session.post(f"{self.base}{action}", data={"profile": profile}, allow_redirects=False) as resp:
            assert resp.status == 302, (resp.status, await resp.text())
            return resp.headers["Location"]

    async def hub_api(self, method: str, path: str) -> tuple[int, Any]:
        """The hub's REST API with the login cookie, as the hub's own pages call it."""
        headers = {"X-XSRFToken": self._cookie("_xsrf", "/hub") or ""}
        async with self.session.request(method, f"{self.base}/hub/api{path}", headers=headers) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if text.startswith(("{", "[")) else text)

    async def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        model: Any = None
        while time.monotonic() < deadline:
            status, model = await self.hub_api("GET", "/user")
            assert status == 200, (status, model)
            server = (model.get("servers") or {}).get("")
            if server and server.get("ready"):
                return server
            if not server and not model.get("pending"):
                raise AssertionError(f"{self.name}'s server is gone: the spawn failed ({model})")
            await asyncio.sleep(0.25)
        raise AssertionError(f"{self.name}'s server not ready in {timeout}s: {model}")

    async def open_lab(self) -> None:
        """Follow the OAuth dance from /user/<name>/lab, which sets the server's cookies."""
        async with self.session.get(f"{self.base}/user/{self.name}/lab") as resp:
            assert resp.status == 200, (resp.status, str(resp.url))

    async def server_get(self, path: str) -> Any:
        async with self.session.get(f"{self.base}/user/{self.name}/{path}", allow_redirects=False) as resp:
            assert resp.status == 200, (resp.status, await resp.text())
            return await resp.json()

    async def first_stream_events(self, count: int = 2, timeout: float = 20) -> list[tuple[str, dict]]:
        """The first ``count`` events of the GPU panel's stream, read as they arrive."""
        events: list[tuple[str, dict]] = []
        url = f"{self.base}/user/{self.name}/api/gpuburst/stream"
        async with asyncio.timeout(timeout):
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
                assert resp.status == 200, resp.status
                name = ""
                async for raw in resp.content:
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        name = line[len("event: ") :]
                    elif line.startswith("data: "):
                        events.append((name, json.loads(line[len("data: ") :])))
                        if len(events) == count:
                            return events
        return events

    async def kernelspecs(self) -> dict[str, Any]:
        """The server's kernelspecs by name, as the launcher lists them."""
        return (await self.server_get("api/kernelspecs"))["kernelspecs"]

    async def run_cell(self, code: str, timeout: float = 30, kernel: str = "python3") -> str:
        """Start a ``kernel``, execute ``code`` over the kernel websocket, return its stdout."""
        prefix = f"/user/{self.name}"
        headers = {"X-XSRFToken": self._cookie("_xsrf", prefix) or ""}
        async with self.session.post(f"{self.base}{prefix}/api/kernels", json={"name": kernel}, headers=headers) as resp:
            assert resp.status == 201, (resp.status, await resp.text())
            kernel_id = (await resp.json())["id"]
        return await self.execute(kernel_id, code, timeout)

    async def execute(self, kernel_id: str, code: str, timeout: float = 30) -> str:
        """Run ``code`` as a cell sent at once (no waiting for the kernel to be idle); its stdout."""
        prefix = f"/user/{self.name}"
        headers = {"X-XSRFToken": self._cookie("_xsrf", prefix) or ""}
        ws_url = f"{self.base}{prefix}/api/kernels/{kernel_id}/channels".replace("http", "ws", 1)
        msg_id = uuid.uuid4().hex
        request = {
            "header": {
                "msg_id": msg_id,
                "username": self.name,
                "session": uuid.uuid4().hex,
                "msg_type": "execute_request",
                "version": "5.3",
                "date": "",
            },
            "parent_header": {},
            "metadata": {},
            "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False},
        }
        out: list[str] = []
        replied = idle = False
        async with self.session.ws_connect(ws_url, headers=headers) as ws:
            await ws.send_json(request)
            deadline = time.monotonic() + timeout
            # The reply (shell) may overtake the output (iopub): done when both the reply and
            # the kernel's "idle" status for this request have arrived.
            while time.monotonic() < deadline and not (replied and idle):
                msg = await ws.receive_json(timeout=deadline - time.monotonic())
                if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                    continue
                kind = msg["header"]["msg_type"]
                if kind == "stream":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    raise AssertionError(f"cell failed: {msg['content']['ename']}: {msg['content']['evalue']}")
                elif kind == "execute_reply":
                    assert msg["content"]["status"] == "ok", msg["content"]
                    replied = True
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    idle = True
        if replied and idle:
            return "".join(out)
        raise AssertionError(f"no execute_reply within {timeout}s: {''.join(out)}")

    async def stop(self, timeout: float = 30) -> None:
        status, body = await self.hub_api("DELETE", f"/users/{self.name}/server")
        assert status in (202, 204), (status, body)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, model = await self.hub_api("GET", "/user")
            if not (model.get("servers") or {}) and not model.get("pending"):
                return
            await asyncio.sleep(0.25)
        raise AssertionError(f"{self.name}'s server did not stop in {timeout}s")
