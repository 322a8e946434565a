"""`gpuburst bench redirect`: how fast a GPU server moves to a donor when its local GPUs vanish.

The default local federation (origin: one node with 2 GPUs; donor-1 granting 8) and a real
JupyterHub with GPUBurstSpawner. For each run a user starts a 1-GPU server; the hub decides
"origin"; right after that decision, as the pod reaches the API server, another pod takes every
GPU of the origin node (created in the emulator's store before the user's pod, so the
scheduler sees it first). The scheduler reports FailedScheduling; the spawner must delete the
pod and create its replacement on the donor.

``redirect_s`` is the time from the first FailedScheduling event to the replacement pod's
creation on the donor, both read from inside the emulator (no polling). The goal is at most 2 s.

Each sample is a whole spawn (seconds on this machine), so 1,000 samples are out of reach; the
JSON says how many were taken (``--runs``, default 20), gives every quantile and the maximum
over all of them, lists the raw values, and, when the values split into two groups (the largest
gap between sorted values is wider than either group's spread), reports each mode's share and
range instead of hiding them behind one median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from jupyter_gpuburst.bench import stopping
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.spawn import GPU, clear_pods, hub_config, metric_sum, percentile
from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.sim.federation import Federation
from jupyter_gpuburst.sim.testing import running_federation

THIEF_LABEL = "gpuburst.bench/thief"


class Interposer:
    """Hooks the origin store: steals local GPUs before a user's local pod, times the redirect."""

    def __init__(self, fed: Federation) -> None:
        self.store = fed.origin.store
        self._create = self.store.create
        self._record_event = self.store.record_event
        self.store.create = self.create  # type: ignore[method-assign]
        self.store.record_event = self.record_event  # type: ignore[method-assign]
        self.pod_name: str | None = None
        self.failed_at: float | None = None
        self.donor_created_at: float | None = None
        self.thieves: list[str] = []
        self.stole = 0

    def restore(self) -> None:
        self.store.create = self._create  # type: ignore[method-assign]
        self.store.record_event = self._record_event  # type: ignore[method-assign]

    def arm(self, pod_name: str) -> None:
        self.pod_name, self.failed_at, self.donor_created_at, self.stole = pod_name, None, None, 0

    def create(self, rtype: str, obj: dict[str, Any], namespace: str | None = None, **kwargs: Any) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        site = (meta.get("labels") or {}).get(keys.SITE_LABEL)
        if rtype == "pods" and meta.get("name") == self.pod_name and not kwargs.get("dry_run"):
            if site == keys.ORIGIN_SITE and not self.stole:
                self._steal(namespace or meta.get("namespace") or "default")
            elif site and site != keys.ORIGIN_SITE and self.donor_created_at is None:
                self.donor_created_at = time.monotonic()
        return self._create(rtype, obj, namespace, **kwargs)

    def record_event(self, involved: dict[str, Any], reason: str, message: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if reason == "FailedScheduling" and (involved.get("metadata") or {}).get("name") == self.pod_name and self.failed_at is None:
            self.failed_at = time.monotonic()
        return self._record_event(involved, reason, message, *args, **kwargs)

    def _steal(self, namespace: str) -> None:
        """Bind a pod holding every GPU of every origin GPU node, as another team's job would."""
        nodes, _ = self.store.list("nodes")
        for node in nodes:
            allocatable = int((node.get("status") or {}).get("allocatable", {}).get(GPU, 0))
            if not allocatable or liqo.is_virtual_node(node):
                continue
            name = f"thief-{node['metadata']['name']}-{len(self.thieves)}"
            self._create(
                "pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": namespace, "labels": {THIEF_LABEL: "1"}},
                    "spec": {
                        "nodeName": node["metadata"]["name"],
                        "containers": [
                            {
                                "name": "job",
                                "image": "gpuburst/bench-thief:1",
                                "command": ["sleep", "3600"],
                                "resources": {"limits": {GPU: str(allocatable)}},
                            }
                        ],
                    },
                },
                namespace,
            )
            self.thieves.append(f"{namespace}/{name}")
            self.stole += allocatable

    def release_gpus(self) -> None:
        for key in self.thieves:
            namespace, name = key.split("/", 1)
            try:
                self.store.delete("pods", namespace, name, grace_period_seconds=0)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.thieves.clear()


async def wait_gone(fed: Federation, namespace: str, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not fed.origin.store.list("pods", namespace, field_selector=f"metadata.name={name}")[0]:
            return
        await asyncio.sleep(0.05)


async def run(runs: int, state_dir: Path) -> dict[str, Any]:
    kubeconfig = state_dir / "kubeconfig"
    redirect_s: list[float] = []
    spawn_s: list[float] = []
    failures: list[str] = []
    async with running_federation(state_dir=state_dir / "sim", kubeconfig=kubeconfig) as fed:
        interposer = Interposer(fed)
        # an idle donor pod never gets rescheduled here; keep the grace long so it cannot interfere
        hub = HubProcess(
            state_dir / "hub",
            hub_config("gpuburst", 120, "c.GPUBurstSpawner.donor_pending_grace_seconds = 60"),
            env={"KUBECONFIG": str(kubeconfig)},
            log_level="WARN",
        )
        await hub.start()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
                names = [f"mover{i:02d}" for i in range(runs)]
                status, body = await hub.request(session, "POST", "/users", json={"usernames": names})
                if status != 201:
                    raise RuntimeError(f"could not create users: HTTP {status}: {body}")
                await hub.capacity(session)  # start the tracker once
                for name in names:
                    pod_name = f"jupyter-{name}"
                    interposer.arm(pod_name)
                    started = time.monotonic()
                    status, body = await hub.request(session, "POST", f"/users/{name}/server", json={"profile": "gpu1"})
                    if status != 201:
                        failures.append(f"{name}: HTTP {status}: {str(body)[:300]}")
                    else:
                        spawn_s.append(time.monotonic() - started)
                    if interposer.failed_at is not None and interposer.donor_created_at is not None:
                        redirect_s.append(interposer.donor_created_at - interposer.failed_at)
                    else:
                        failures.append(
                            f"{name}: no redirect seen (stole {interposer.stole} GPUs, FailedScheduling at {interposer.failed_at}, donor pod at {interposer.donor_created_at})"
                        )
                    await hub.request(session, "DELETE", f"/users/{name}/server")
                    await wait_gone(fed, "default", pod_name)
                    interposer.release_gpus()
                redirects = await metric_sum(hub, session, "jupyterhub_gpuburst_redirects_total")
        finally:
            interposer.restore()
            await hub.stop(timeout=30)
            await clear_pods(fed, timeout=60)
    result = {
        "benchmark": "redirect",
        "runs": runs,
        "samples": len(redirect_s),
        "redirected": len(redirect_s),
        "ready": len(spawn_s),
        "redirect_s": distribution(redirect_s),
        "redirect_s_all": [round(v, 4) for v in redirect_s],
        "modes": modes(redirect_s),
        "spawn_s": distribution(spawn_s),
        "redirects_metric": int(redirects),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "failures": failures[:5],
    }
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result


def distribution(values: list[float]) -> dict[str, float | int | None]:
    """Every quantile that the sample count can support, plus min and max."""
    if not values:
        return {"n": 0, "min": None, "p50": None, "p90": None, "p95": None, "p99": None, "max": None, "mean": None}
    return {
        "n": len(values),
        "min": round(min(values), 4),
        "p50": round(percentile(values, 50), 4),
        "p90": round(percentile(values, 90), 4),
        "p95": round(percentile(values, 95), 4),
        "p99": round(percentile(values, 99), 4),
        "max": round(max(values), 4),
        "mean": round(statistics.fmean(values), 4),
    }


def modes(values: list[float]) -> list[dict[str, float | int]]:
    """One entry per mode: split at the widest gap when it exceeds both sides' own ranges."""
    ordered = sorted(values)
    if len(ordered) < 4:
        return [_mode(ordered, len(ordered))] if ordered else []
    gaps = [(ordered[i + 1] - ordered[i], i) for i in range(len(ordered) - 1)]
    width, i = max(gaps)
    low, high = ordered[: i + 1], ordered[i + 1 :]
    if width > (low[-1] - low[0]) and width > (high[-1] - high[0]):
        return [_mode(low, len(ordered)), _mode(high, len(ordered))]
    return [_mode(ordered, len(ordered))]


def _mode(group: list[float], total: int) -> dict[str, float | int]:
    return {
        "n": len(group),
        "share": round(len(group) / total, 3),
        "min": round(group[0], 4),
        "median": round(statistics.median(group), 4),
        "max": round(group[-1], 4),
    }


def checks(result: dict[str, Any], goal_s: float = 2.0) -> dict[str, bool]:
    """Pass/fail over the run's JSON: every spawn moved and came up; the slowest move within goal."""
    worst = result["redirect_s"]["max"]
    return {
        "all_redirected": result["redirected"] == result["runs"],
        "all_ready": result["ready"] == result["runs"],
        "redirects_counted_by_hub": result["redirects_metric"] == result["runs"],
        "redirect_max_within_goal": worst is not None and worst <= goal_s,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench redirect", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="spawns to redirect, one after another (default 20)")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub and pod logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return stopping.run_and_print(lambda state_dir: run(args.runs, state_dir), args.state_dir, "redirect", args.json)
