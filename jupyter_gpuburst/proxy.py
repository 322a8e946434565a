"""JupyterHub's proxy for the demo and tests: the Python configurable-http-proxy, streaming.

The Python implementation of configurable-http-proxy (PyPI ``configurable-http-proxy``) needs no
Node runtime, but it buffers each whole response before sending it on. Event streams never end,
so the spawn page's progress and the Lab panel's live stream would never arrive. This module
runs the same proxy with one handler changed: responses are passed on chunk by chunk as they
arrive. Everything else (routes API, websockets, command-line options) is the library's own.

Run it as JupyterHub's proxy command:
``c.ConfigurableHTTPProxy.command = [sys.executable, "-m", "jupyter_gpuburst.proxy"]``.
"""

from __future__ import annotations

import sys

from configurable_http_proxy import configproxy, handlers
from tornado import httputil
from tornado.httpclient import AsyncHTTPClient

# The library's proxy copies these from upstream itself or must not forward them: the body is
# re-framed by this server (chunked), so upstream framing headers would be wrong.
HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "content-encoding", "connection"})
# A stream lives as long as the user's tab is open; connecting still times out as before.
STREAM_TIMEOUT_S = 24 * 3600.0


class StreamingProxyHandler(handlers.ProxyHandler):
    """``ProxyHandler`` that writes the upstream body as it arrives instead of at the end."""

    async def call_proxy(self, path=None):
        url = await self.get_target_url(path)
        if url is None:
            return
        request = self._get_proxy_request(url)
        upstream = httputil.HTTPHeaders()

        def on_header(line: str) -> None:
            if line.startswith("HTTP/"):
                start = httputil.parse_response_start_line(line.strip())
                self.set_status(start.code, start.reason)
                upstream.clear()  # a 1xx interim response may come first
            elif line.strip():
                upstream.parse_line(line)
            else:
                self._copy_headers(upstream)

        def on_chunk(chunk: bytes) -> None:
            self.write(chunk)
            self.flush()

        request.header_callback = on_header
        request.streaming_callback = on_chunk
        request.request_timeout = STREAM_TIMEOUT_S
        try:
            await AsyncHTTPClient().fetch(request, raise_error=False)
        except Exception as err:
            if not self._headers_written:
                await self.handle_proxy_error(503, err)
                return
        if not self._finished:
            self.finish()

    def _copy_headers(self, upstream: httputil.HTTPHeaders) -> None:
        existing = {name.lower() for name, _value in self._headers.get_all()}
        for name, value in upstream.get_all():
            if name.lower() in HOP_BY_HOP:
                continue
            if name.lower() in existing:
                self.set_header(name, value)
            else:
                self.add_header(name, value)


def main() -> None:
    configproxy.ProxyHandler = StreamingProxyHandler  # the app's route table reads this name
    from configurable_http_proxy.cli import main as chp_main

    sys.exit(chp_main())


if __name__ == "__main__":
    main()
