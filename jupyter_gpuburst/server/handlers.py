"""HTTP handlers of the server extension: placement, gpus, history, stream (see docs/api.md).

All are read-only GETs, authenticated like every jupyter_server API and authorized through the
server's Authorizer on the `gpuburst` resource. The kernel list in a sample names kernels and
notebooks, so it is only shown to users who may also read the `kernels` resource.
Telemetry requests do not count as user activity: an open panel must not keep an idle server
from being culled.
"""

from __future__ import annotations

import asyncio
import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.iostream import StreamClosedError

from jupyter_gpuburst.gpu.sampler import Sample, Sampler

AUTH_RESOURCE = "gpuburst"
SAMPLER_SETTING = "gpuburst_sampler"
PLACEMENT_SETTING = "gpuburst_placement"
KEEPALIVE_SETTING = "gpuburst_keepalive_s"
STOPPING_SETTING = "gpuburst_stopping"
# the last event of every stream when the server stops: the page can say so at once, before
# JupyterLab finds the server gone and says only that it is unavailable
STOPPING_EVENT = b"event: stopping\ndata: {}\n\n"


class Stopping:
    """Set once the server begins to stop (``stop_extension``)."""

    def __init__(self) -> None:
        self.is_set = False


class GPUBurstHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE
    _track_activity = False

    @property
    def sampler(self) -> Sampler:
        return self.settings[SAMPLER_SETTING]

    @property
    def placement(self) -> dict:
        return self.settings[PLACEMENT_SETTING]

    async def may_read_kernels(self) -> bool:
        result = self.authorizer.is_authorized(self, self.current_user, "read", "kernels")
        return bool(await result) if asyncio.iscoroutine(result) else bool(result)

    def encode(self, sample: Sample, kernels_visible: bool) -> bytes:
        # encoded once per sample for all readers with the same view, never per request
        return sample.body(kernels_visible)


class PlacementHandler(GPUBurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(json.dumps(self.placement))


class GPUsHandler(GPUBurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        sample = await self.sampler.current()
        self.finish(self.encode(sample, await self.may_read_kernels()))


class HistoryHandler(GPUBurstHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        visible = await self.may_read_kernels()
        samples = self.sampler.history()
        # Samples are already encoded; joining bytes keeps a 300-sample reply off the CPU.
        body = b",".join(self.encode(s, visible) for s in samples)
        period = json.dumps(self.sampler.period_s)
        self.finish(b'{"period_s":' + period.encode() + b',"samples":[' + body + b"]}")


class StreamHandler(GPUBurstHandler):
    """Server-Sent Events: `placement` once, then one `sample` event per sample taken, and
    `stopping` as the last when the server stops."""

    _gone = False

    def on_connection_close(self) -> None:
        self._gone = True

    @web.authenticated
    @authorized
    async def get(self) -> None:
        keepalive = float(self.settings.get(KEEPALIVE_SETTING, 15.0))
        stopping: Stopping = self.settings.get(STOPPING_SETTING) or Stopping()
        visible = await self.may_read_kernels()
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache, no-store")
        self.set_header("X-Accel-Buffering", "no")  # nginx-style proxies must not buffer the stream
        try:
            self.write(b"event: placement\ndata: " + json.dumps(self.placement).encode() + b"\n\n")
            await self.flush()
            async with self.sampler.subscribe():
                last: Sample | None = None
                wait = min(keepalive, max(self.sampler.period_s * 2, 0.5))
                idle = 0.0
                while not self._gone:
                    # a timeout built into the wait: no extra task and timer per client and sample
                    sample = await self.sampler.next_sample(last, timeout=wait)
                    if stopping.is_set:
                        self.write(STOPPING_EVENT)
                        await self.flush()
                        break
                    if sample is None:
                        idle += wait
                        if idle >= keepalive:
                            idle = 0.0
                            self.write(b": keepalive\n\n")
                            await self.flush()
                        continue
                    last = sample
                    idle = 0.0
                    # one frame per sample shared by every client: no per-client encoding or copying
                    self.write(last.sse(visible))
                    await self.flush()
        except StreamClosedError:
            pass
        finally:
            self._gone = True


ACTIVITY_SETTING = "gpuburst_activity"


class CullingHandler(GPUBurstHandler):
    """``GET``: what the hub's GPU culler plans for this server and its GPU kernels."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        reporter = self.settings.get(ACTIVITY_SETTING)
        self.finish(json.dumps(reporter.state() if reporter is not None else {"reporting": False}))


class CullingKeepHandler(GPUBurstHandler):
    """``POST {"target": "server" | <GPU kernel id>}``: the student's Keep, passed to the hub."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        reporter = self.settings.get(ACTIVITY_SETTING)
        if reporter is None:
            raise web.HTTPError(404, "GPU culling is not watching this server")
        try:
            target = json.loads(self.request.body or b"{}").get("target")
        except (ValueError, AttributeError):
            target = None
        if not isinstance(target, str) or not target:
            raise web.HTTPError(400, 'a keep is {"target": "server" or a GPU kernel id}')
        status, message = await reporter.keep(target)
        if status != 200:
            self.set_status(status)
        self.finish(json.dumps({"message": message, **reporter.state()}))
