"""`GET /api/status` at a steady rate, from a process of its own, for `gpuburst bench telemetry`.

The latency a client sees must not include the load generator's own work: in the benchmark's
process, 50 stream clients share one event loop, and a status response that arrives while that
loop is reading samples or opening connections waits there, which the server never caused. So
the status requests come from here, with a loop that does nothing else.

Run as ``python -m jupyter_gpuburst.bench.status_probe`` with a JSON object on standard input
(the token stays out of the process list): ``url``, ``token``, ``rate`` (requests per second),
``start_at`` and ``until`` (``time.monotonic()`` values: on Linux the monotonic clock is the same
in every process). Prints one JSON list, a ``[started, seconds]`` pair per request, in order: when
it was sent, on that clock, and how long it took.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp


async def probe(url: str, token: str, rate: float, start_at: float, until: float) -> list[tuple[float, float]]:
    headers = {"Authorization": f"token {token}"}
    out: list[tuple[float, float]] = []
    interval = 1.0 / rate
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        # one request before the window opens the keep-alive connection every timed request reuses
        async with session.get(url, headers=headers) as r:
            await r.read()
            r.raise_for_status()
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        nxt = time.monotonic()
        while time.monotonic() < until:
            started = time.monotonic()
            async with session.get(url, headers=headers) as r:
                await r.read()
                r.raise_for_status()
            out.append((started, time.monotonic() - started))
            nxt += interval
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
    return out


def main() -> int:
    options = json.loads(sys.stdin.read())
    latencies = asyncio.run(probe(options["url"], options["token"], float(options["rate"]),
                                  float(options["start_at"]), float(options["until"])))
    print(json.dumps(latencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
