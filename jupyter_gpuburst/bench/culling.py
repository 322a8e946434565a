"""`gpuburst bench culling`: how soon after its timeout an idle GPU server is stopped, end to end.

A real JupyterHub with GPUBurstSpawner and GPU culling on, in front of the local federation (an
origin and a donor); real jupyter_server user servers with simulated GPUs sample and report their
GPU activity as in production, and the hub's culler warns and stops them through JupyterHub's own
API. Each round starts ``--servers`` servers and one more, runs a cell on each, and watches the
hub's API for each stop. The cells end at moments drawn at random, so each GPU goes idle anywhere
in the servers' sampling and reporting cycles; the extra server computes past every timeout and
must never be stopped.

A stop's lag is the time from its timeout (the cell's end, as the kernel's clock on this machine
saw it, plus the timeout) to the hub's stop of the server. Checks (each can fail): every idle server stopped,
each after a warning; none before its timeout; every lag within one of the server's activity
samples plus the age of the GPU reading a sample uses (the server's ``sampling_period_s``), plus
1 s for the hub's API, the proxy and this benchmark's 0.1 s polling; no computing server stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from jupyter_gpuburst.bench import stats, stopping
from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.spawn import NAMESPACE, federation_config, offload_namespace
from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.server.activity import SAMPLE_EVERY_S
from jupyter_gpuburst.server.app import GPUBurstServerExtension
from jupyter_gpuburst.sim.testing import running_federation

POLL_S = 0.1
# a sample reads the server's latest GPU reading, at most this old
READING_S = float(GPUBurstServerExtension.class_traits()["sampling_period_s"].default_value)
# what the hub's API, the proxy and the 0.1 s polling may add to a stop's lag
SLACK_S = 1.0
# a stop before its timeout by more than this is early (the cell prints its end a moment before it ends)
EARLY_S = 0.1
PROFILE = {
    "display_name": "One GPU",
    "slug": "gpu1",
    "default": True,
    "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "tolerations": [liqo.virtual_node_toleration()]},
}


def hub_config(timeout: float, warning: float, period: float) -> str:
    return f"""
import sys
from pathlib import Path
c.JupyterHub.spawner_class = "gpuburst"
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.last_activity_interval = 3600
c.KubeSpawner.namespace = {NAMESPACE!r}
c.KubeSpawner.cmd = [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
c.KubeSpawner.args = ["--allow-root"]
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 120
c.KubeSpawner.profile_list = {[PROFILE]!r}
c.KubeSpawner.environment = {{"{keys.BACKEND_ENV}": "simulated", "{keys.SIM_GPUS_ENV}": "1"}}
c.Spawner.default_url = "/api"
c.GPUCullingSettings.enabled = True
c.GPUCullingSettings.timeout_seconds = {timeout!r}
c.GPUCullingSettings.warning_seconds = {warning!r}
c.GPUCullingSettings.period_seconds = {period!r}
c.GPUCullingSettings.keep_limit = 0
from jupyter_gpuburst.hub import install
install(c)
"""


class Round:
    """One round's servers: ``users[0]`` computes throughout, the others go idle."""

    def __init__(self, index: int, servers: int) -> None:
        self.users = [f"r{index}-busy"] + [f"r{index}-idle{i}" for i in range(servers)]
        self.tokens: dict[str, str] = {}
        self.idle_at: dict[str, float] = {}  # time.time(): the cell's end, as the kernel saw it
        self.stopped_at: dict[str, float] = {}  # time.time(): the stop, as the hub's API showed it
        self.failures: list[str] = []


async def _ready(hub: HubProcess, http: aiohttp.ClientSession, user: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, model = await hub.request(http, "GET", f"/users/{user}")
        server = (model or {}).get("servers", {}).get("") if status == 200 else None
        if server and server.get("ready"):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{user}'s server was not ready within {timeout:.0f} s")


async def _start(hub: HubProcess, http: aiohttp.ClientSession, rnd: Round, user: str) -> str:
    """Spawn ``user``'s GPU server and start a kernel on it; returns the kernel's id."""
    status, body = await hub.request(http, "POST", f"/users/{user}", json={})
    if status not in (201, 409):
        raise RuntimeError(f"creating {user}: {status} {body}")
    status, body = await hub.request(http, "POST", f"/users/{user}/tokens", json={"note": "bench culling"})
    if status != 201:
        raise RuntimeError(f"a token for {user}: {status} {body}")
    rnd.tokens[user] = body["token"]
    status, body = await hub.request(http, "POST", f"/users/{user}/server", json={"profile": "gpu1"})
    if status not in (201, 202):
        raise RuntimeError(f"spawning {user}: {status} {body}")
    await _ready(hub, http, user)
    headers = {"Authorization": f"token {rnd.tokens[user]}"}
    async with http.post(f"{hub.url}/user/{user}/api/kernels", json={"name": "python3"}, headers=headers) as response:
        if response.status != 201:
            raise RuntimeError(f"a kernel on {user}'s server: {response.status} {await response.text()}")
        return (await response.json())["id"]


async def _watch_stops(hub: HubProcess, http: aiohttp.ClientSession, rnd: Round, until: float) -> None:
    """Note when each idle server's stop begins (pending stop, or gone) by polling the hub's user list."""
    idle = rnd.users[1:]
    while time.monotonic() < until and len(rnd.stopped_at) < len(idle):
        status, users = await hub.request(http, "GET", "/users?state=active")
        now = time.time()
        if status == 200:
            active = {u["name"]: u.get("servers", {}).get("") for u in users}
            for user in idle:
                server = active.get(user)
                if user not in rnd.stopped_at and user in rnd.idle_at and (server is None or server.get("pending") == "stop"):
                    rnd.stopped_at[user] = now
        await asyncio.sleep(POLL_S)


async def run_round(hub: HubProcess, http: aiohttp.ClientSession, rnd: Round, timeout: float, sample_s: float, rng: random.Random) -> None:
    busy_s = timeout + 3 * sample_s + 5

    async def server(user: str, seconds: float) -> None:
        # each server's cell starts as soon as its own kernel does: its GPU has been idle only
        # since its own start, never while the others start
        kernel = await _start(hub, http, rnd, user)
        # the cell prints when it ended, by this machine's clock (the kernel runs here): the reply
        # reaching us may come seconds later on a loaded machine
        code = f"import time\ntime.sleep({seconds!r})\nprint(time.time())"
        out = await execute(f"{hub.url}/user/{user}", rnd.tokens[user], kernel, code, timeout=seconds + 60)
        try:
            rnd.idle_at[user] = float(out.get("stdout") or "")
        except ValueError:
            rnd.failures.append(f"{user}'s cell: {out}")

    # the computing server outlasts every idle one's timeout; each idle one's GPU goes idle at a
    # random phase of its sampling and reporting cycles
    computing = asyncio.ensure_future(server(rnd.users[0], busy_s))
    idle = [server(user, round(rng.uniform(1.0, 1.0 + 2 * sample_s), 3)) for user in rnd.users[1:]]
    watcher = asyncio.ensure_future(_watch_stops(hub, http, rnd, time.monotonic() + 300 + timeout))
    try:
        await asyncio.gather(*idle)
        await watcher
        await computing
    finally:
        watcher.cancel()
        computing.cancel()
        await hub.request(http, "DELETE", f"/users/{rnd.users[0]}/server")


def warned_before_stop(log: str, user: str) -> bool:
    warned = re.search(rf"GPU culling: warning {re.escape(user)}\b", log)
    stopped = re.search(rf"GPU culling: stopping {re.escape(user)}'s server", log)
    return bool(warned and stopped and warned.start() < stopped.start())


def checks(result: dict[str, Any]) -> dict[str, bool]:
    lags = result["lag_s"]
    return {
        "every_idle_server_stopped": result["idle_servers"] > 0 and result["stopped"] == result["idle_servers"],
        "every_stop_warned_first": result["stopped"] > 0 and result["warned_first"] == result["stopped"],
        "never_before_timeout": lags["n"] > 0 and lags["min"] >= -EARLY_S,
        "within_one_sample_and_reading": lags["n"] > 0 and lags["max"] <= result["bound_s"],
        "no_computing_server_stopped": result["computing_stopped"] == 0,
        "no_failures": not result["failures"],
    }


async def run(rounds: int, servers: int, timeout: float, warning: float, period: float, seed: int, state_dir: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    sample_s = min(SAMPLE_EVERY_S, period)
    config = federation_config(local_gpus=4, donor_gpus=max(4, servers + 1), users=servers + 1)
    results: list[Round] = []
    async with running_federation(config, state_dir=state_dir / "sim", kubeconfig=state_dir / "kubeconfig") as fed:
        offload_namespace(fed, NAMESPACE)
        hub = HubProcess(state_dir / "hub", hub_config(timeout, warning, period), env={"KUBECONFIG": str(state_dir / "kubeconfig")})
        await hub.start()
        try:
            async with aiohttp.ClientSession() as http:
                for index in range(rounds):
                    rnd = Round(index, servers)
                    results.append(rnd)
                    try:
                        await run_round(hub, http, rnd, timeout, sample_s, rng)
                    except Exception as exc:  # noqa: BLE001 - reported in the JSON, and fails its check
                        rnd.failures.append(f"round {index}: {exc.__class__.__name__}: {exc}")
            log = hub.log_path.read_text(errors="replace")
        finally:
            await hub.stop()
    by_user = {u: r.stopped_at[u] - (r.idle_at[u] + timeout) for r in results for u in r.stopped_at}
    lags = list(by_user.values())
    idle = [(r, u) for r in results for u in r.users[1:]]
    computing_stopped = sum(1 for r in results if re.search(rf"GPU culling: stopping {re.escape(r.users[0])}'s server", log))
    result: dict[str, Any] = {
        "benchmark": "culling",
        "rounds": rounds,
        "servers_per_round": servers,
        "timeout_s": timeout,
        "warning_s": warning,
        "period_s": period,
        "sample_s": sample_s,
        "bound_s": sample_s + READING_S + SLACK_S,
        "seed": seed,
        "idle_servers": len(idle),
        "stopped": sum(1 for r, u in idle if u in r.stopped_at),
        "warned_first": sum(1 for r, u in idle if u in r.stopped_at and warned_before_stop(log, u)),
        "computing_stopped": computing_stopped,
        "lag_s": {**stats.summary(lags, digits=3), "min": round(min(lags), 3) if lags else None},
        "extremes": {u: round(by_user[u], 3) for u in sorted(by_user, key=by_user.get)[:2] + sorted(by_user, key=by_user.get)[-2:]},
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "failures": [f for r in results for f in r.failures][-6:],
    }
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench culling", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of servers (default 4)")
    parser.add_argument("--servers", type=int, default=6, help="idle servers per round, beside one that computes (default 6)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="GPU idle timeout, seconds (default 30: longer than a start under load)"
    )
    parser.add_argument("--warning", type=float, default=8.0, help="warning before the stop, seconds (default 8)")
    parser.add_argument(
        "--period", type=float, default=2.0, help="reports and sweeps, seconds (default 2; servers sample every min(5, period))"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the cells' lengths (default 1)")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep the hub's and pods' logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.servers < 1:
        parser.error("--rounds and --servers must be at least 1")
    if not 0 < args.warning < args.timeout or args.period <= 0:
        parser.error("need 0 < --warning < --timeout and --period > 0")
    return stopping.run_and_print(
        lambda state_dir: run(args.rounds, args.servers, args.timeout, args.warning, args.period, args.seed, state_dir),
        args.state_dir,
        "culling",
        args.json,
    )
