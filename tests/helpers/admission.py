"""Something done to a site the moment an object is created there, before its creator can go on.

A test that stands in for a preemption "the moment the hub writes a Secret" must act before the
hub's next request is served, or it races the hub: on a loaded machine a watch of its own
delivers the creation after the hub has gone on and seen the rest through (the kube tier once
failed so). On the real control plane, ``on_create`` therefore acts inside the creation's
admission: a validating webhook, served here, that kube-apiserver calls before it stores the
object and answers its creator. The emulator runs in the test's event loop, so a watch of its
store wakes before the loop reads the creator's next request: it acts there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from jupyter_gpuburst.sim.kube.remotestore import WEBHOOKS
from jupyter_gpuburst.sim.testing import wait_until

PROBE_PREFIX = "admission-probe-"


@contextlib.asynccontextmanager
async def on_create(federation: Any, site: Any, plural: str, name: str, act: Callable[[], None]) -> AsyncIterator[list[str]]:
    """Run ``act`` (blocking calls allowed) once, when ``plural`` ``name`` (core API, any
    namespace) is created on ``site``; yields the names acted on, for the test to check it ran."""
    acted: list[str] = []
    if federation.control_plane == "kube":
        async with _webhook(site, plural, name, act, acted):
            yield acted
        return
    watch = site.store.watch(plural)

    async def follow() -> None:
        async for etype, obj in watch:
            if etype == "ADDED" and obj["metadata"]["name"] == name:
                act()
                acted.append(name)
                return

    task = asyncio.ensure_future(follow())
    try:
        yield acted
    finally:
        task.cancel()
        watch.close()
        await asyncio.gather(task, return_exceptions=True)


@contextlib.asynccontextmanager
async def _webhook(site: Any, plural: str, name: str, act: Callable[[], None], acted: list[str]) -> AsyncIterator[None]:
    probe = f"{PROBE_PREFIX}{uuid.uuid4().hex[:8]}"
    probed: list[str] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        asked = body["request"]
        created = (asked.get("object") or {}).get("metadata", {}).get("name")
        if created == probe:
            probed.append(created)
        elif created == name and not asked.get("dryRun") and not acted:
            await asyncio.to_thread(act)
            acted.append(created)
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": asked["uid"], "allowed": True}}
        return web.json_response(answer)

    cp = site.control_plane
    serving = cp.pki.serving(f"webhook-{uuid.uuid4().hex[:8]}", ["127.0.0.1"])
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(serving.cert, serving.key)
    app = web.Application()
    app.router.add_post("/", review)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listener = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await listener.start()
    port = listener._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config_name = f"on-create-{uuid.uuid4().hex[:8]}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": config_name},
        "webhooks": [
            {
                "name": "on-create.tests.gpuburst.example",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/", "caBundle": base64.b64encode(cp.pki.ca.read_bytes()).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [plural]}],
                # only the object acted on and the probe: nothing else the tests create waits on this
                "matchConditions": [{"name": "named", "expression": f"object.metadata.name in {json.dumps([name, probe])}"}],
                "failurePolicy": "Fail",
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }
    store = site.store
    try:
        store.create(WEBHOOKS, config)

        async def in_force() -> bool:
            # the API server's webhooks come from a watch of their configurations: a dry-run
            # create of the probe reaches this one once it is in force there (from a thread: the
            # webhook answers on this loop, which a blocking call here would hold)
            probe_object = {"metadata": {"name": probe, "namespace": "default"}}
            await asyncio.to_thread(store.create, plural, probe_object, "default", dry_run=True)
            return bool(probed)

        await wait_until(in_force, timeout=30, what=f"the webhook on {plural} in force")
        yield
    finally:
        store.delete(WEBHOOKS, None, config_name)
        await runner.cleanup()
