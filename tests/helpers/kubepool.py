"""The kube tier's federations, kept from one test to the next: one per pytest worker, put back
as it started after each test.

A federation on the real control plane costs 11.5 CPU seconds and 10-12 s to start (two sites'
etcd, kube-apiserver, controller-manager and scheduler, Liqo's CRDs, the node agents), more than
most kube tests spend on their own. Once started, the install docs/install.md asks of an admin is
applied to it (the hub's RBAC, the warm pools' PriorityClass, each donor's kernel namespace), and
what is then on every site, once it stops changing, is its baseline. After a test, everything
that is not in the baseline is deleted (pods with no grace period), and the federation
is kept when every site is back to its baseline and our kubelets run nothing.

A federation is stopped instead, and the next test gets a new one, when its test failed (what it
left may be why), when a control-plane process was killed or restarted (a fault test), when a
baseline object is gone or a node was changed (a test removed part of the install, or cordoned a
node), or when the reset does not finish in ``RESET_TIMEOUT_S``. Kept federations need one event
loop for all of a worker's tests (the kube tier runs with pytest-asyncio's session loop scope);
elsewhere each test starts its own, as before.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jupyter_gpuburst.sim.errors import ApiError

log = logging.getLogger(__name__)

RESET_TIMEOUT_S = 45.0
SETTLE_PERIOD_S = 1.0
# made again at once by kube-controller-manager in every namespace: never part of what a test left
REMADE_BY_CONTROLLERS = {("configmaps", "kube-root-ca.crt"), ("serviceaccounts", "default")}
# written all the time by the control plane and the node agents; a test's events are deleted
# with the rest, but they are not what tells a site settled
CHURN = {"events", "leases"}
# a node a test changed (these fields, or the kinds of its conditions) is not put back: the next
# test gets a new federation
NODE_FIELDS = (("metadata", "labels"), ("spec", "taints"), ("spec", "unschedulable"), ("status", "capacity"))

Key = tuple[str, str, str, str]  # (collection path, namespace, name, uid)


@dataclass
class Baseline:
    objects: dict[str, set[Key]] = field(default_factory=dict)  # per site
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # per site: node name -> fields
    pids: dict[str, list[int]] = field(default_factory=dict)  # per site: control-plane processes


def _client(site: Any) -> httpx.AsyncClient:
    return site.control_plane.harness_client(timeout=10.0)


async def _collections(client: httpx.AsyncClient) -> list[str]:
    """Every collection of the API server that can be listed and whose items can be deleted,
    each group at its preferred version (so each kind is seen once)."""
    versions = ["/api/v1"]
    for group in (await client.get("/apis")).json()["groups"]:
        # events.k8s.io serves the core group's events again
        if group["name"] != "events.k8s.io":
            versions.append(f"/apis/{group['preferredVersion']['groupVersion']}")
    paths = []
    for version in versions:
        for resource in (await client.get(version)).json()["resources"]:
            if "/" not in resource["name"] and {"list", "delete"} <= set(resource["verbs"]):
                paths.append(f"{version}/{resource['name']}")
    return paths


async def _snapshot(client: httpx.AsyncClient, collections: Iterable[str]) -> tuple[set[Key], dict[str, Any]]:
    """What the site holds, as keys, and its nodes' fields that a test must leave as they were."""
    keys: set[Key] = set()
    nodes: dict[str, Any] = {}
    for path in collections:
        response = await client.get(path)
        if response.status_code != 200:
            continue
        for item in response.json().get("items") or []:
            meta = item["metadata"]
            keys.add((path, meta.get("namespace") or "", meta["name"], meta["uid"]))
            if path == "/api/v1/nodes":
                fields = [(item.get(part) or {}).get(name) for part, name in NODE_FIELDS]
                conditions = sorted(c["type"] for c in (item.get("status") or {}).get("conditions") or [])
                nodes[meta["name"]] = [*fields, conditions]
    return keys, nodes


def _resource(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _item_url(key: Key) -> str:
    path, namespace, name, _ = key
    if not namespace:
        return f"{path}/{name}"
    version, resource = path.rsplit("/", 1)
    return f"{version}/namespaces/{namespace}/{resource}/{name}"


class FederationPool:
    """At most one idle federation (a worker runs one test at a time)."""

    def __init__(self, state_root: Path, audit_collection: Path) -> None:
        self.state_root = state_root
        self.audit_collection = audit_collection
        self.idle: Any = None
        self.baseline = Baseline()
        self._collections: dict[str, list[str]] = {}
        self._contexts: dict[int, Any] = {}  # id(federation) -> the running_federation it came from
        self.started = 0
        self.kept = 0

    async def take(self, install: Any) -> Any:
        """A federation at its baseline: the idle one, or a new one, installed by ``install(fed)``."""
        if self.idle is not None:
            fed, self.idle = self.idle, None
            self.kept += 1
            return fed
        from jupyter_gpuburst.sim.testing import running_federation

        state_dir = self.state_root / f"federation-{self.started}"
        self.started += 1
        context = running_federation(state_dir=state_dir / "pods", kubeconfig=state_dir / "federation.kubeconfig", control_plane="kube")
        fed = await context.__aenter__()
        fed.kubeconfig = fed.kubeconfig_path = state_dir / "federation.kubeconfig"
        self._contexts[id(fed)] = context
        try:
            install(fed)
            await self._take_baseline(fed)
        except BaseException:
            await self._stop(fed)
            raise
        return fed

    async def give_back(self, fed: Any, failed: bool) -> None:
        """Keep ``fed`` for the next test if it can be put back as it started; else stop it."""
        why = "its test failed" if failed else await self._reset(fed)
        if why is None:
            self.idle = fed
            return
        log.info("kube tier: a new federation for the next test: %s", why)
        with open(self.state_root / "stopped.log", "a") as record:
            record.write(f"{fed.state_dir.parent.name}: {why}\n")
        await self._stop(fed)

    async def close(self) -> None:
        if self.idle is not None:
            fed, self.idle = self.idle, None
            await self._stop(fed)

    async def _stop(self, fed: Any) -> None:
        try:
            await self._contexts.pop(id(fed)).__aexit__(None, None, None)
        finally:
            audit = fed.origin.control_plane.audit_log
            if audit.exists():
                shutil.copyfile(audit, self.audit_collection / f"{uuid.uuid4().hex}.jsonl")

    async def _take_baseline(self, fed: Any) -> None:
        """The sites' objects once two snapshots a period apart agree (controllers and our
        reflection act on the install for a while after it is applied)."""
        previous: dict[str, set[Key]] = {}
        deadline = time.monotonic() + RESET_TIMEOUT_S
        while True:
            current: dict[str, set[Key]] = {}
            for name, site in fed.clusters.items():
                async with _client(site) as client:
                    if name not in self._collections:
                        self._collections[name] = await _collections(client)
                    keys, nodes = await _snapshot(client, self._collections[name])
                current[name] = {key for key in keys if _resource(key[0]) not in CHURN}
                self.baseline.nodes[name] = nodes
                self.baseline.pids[name] = sorted(site.control_plane.pids())
            if current == previous or time.monotonic() > deadline:
                break
            previous = current
            await asyncio.sleep(SETTLE_PERIOD_S)
        self.baseline.objects = current

    async def _reset(self, fed: Any) -> str | None:
        """Delete what the test left on every site; None once all is back to the baseline, else
        why the federation cannot be kept."""
        for name, site in fed.clusters.items():
            if sorted(site.control_plane.pids()) != self.baseline.pids[name]:
                return f"{name}'s control plane was stopped or restarted"
        deadline = time.monotonic() + RESET_TIMEOUT_S
        # the origin first: its reflection would otherwise make again what is deleted on a donor
        order = [fed.origin, *fed.donors.values()]
        while True:
            left: dict[str, set[Key]] = {}
            for site in order:
                async with _client(site) as client:
                    keys, nodes = await _snapshot(client, self._collections[site.name])
                    baseline = self.baseline.objects[site.name]
                    if missing := baseline - keys:
                        return f"{site.name} lost what it started with: {sorted(key[:3] for key in missing)[:3]}"
                    if nodes != self.baseline.nodes[site.name]:
                        return f"a node of {site.name} was changed"
                    extra = _leftovers(keys, baseline)
                    await _delete(client, extra)
                    # events come all the time: a test's are deleted, but never waited for
                    if counted := {key for key in extra if _resource(key[0]) != "events"}:
                        left[site.name] = await _until_gone(client, site.store, counted, deadline)
            running = {site.name: site.kubelet.processes() for site in order if site.kubelet is not None}
            if not any(left.values()) and not any(running.values()):
                if not any(left):
                    return None
                continue  # gone: one more look, for what their deletion made
            if time.monotonic() > deadline:
                return f"still there after {RESET_TIMEOUT_S:.0f} s: {_describe(left, running)}"
            await asyncio.sleep(0.2)


def _leftovers(keys: set[Key], baseline: set[Key]) -> set[Key]:
    """What is on a site but not in its baseline: what the test made (leases are the node
    agents' and the control plane's own, and some objects controllers make again at once)."""
    return {key for key in keys - baseline if _resource(key[0]) != "leases" and (_resource(key[0]), key[2]) not in REMADE_BY_CONTROLLERS}


async def _until_gone(client: httpx.AsyncClient, store: Any, keys: set[Key], deadline: float) -> set[Key]:
    """Wait (until ``deadline``) for ``keys`` to be gone from the API server and from the site's
    own store, whose watch cache the next test may read at once; those still there."""
    left = set(keys)
    while left and time.monotonic() < deadline:
        for key in list(left):
            response = await client.get(_item_url(key))
            if response.status_code == 200 and response.json()["metadata"]["uid"] == key[3]:
                continue
            if response.status_code in (200, 404) and not _cached(store, key):
                left.discard(key)
        if left:
            await asyncio.sleep(0.2)
    return left


def _cached(store: Any, key: Key) -> bool:
    """Whether the site's store still holds ``key`` in its cache (for a type it caches; for any
    other, the API server's word, already heard, stands)."""
    path, namespace, name, uid = key
    parts = path.split("/")  # /api/v1/<plural> or /apis/<group>/<version>/<plural>
    rtype = parts[-1] if parts[1] == "api" else f"{parts[-1]}.{parts[2]}"
    try:
        if not store.caches(rtype):
            return False
        return store.get(rtype, namespace or None, name)["metadata"]["uid"] == uid
    except ApiError:
        return False
    except (KeyError, ValueError):  # a type the store does not know at all
        return False


async def _delete(client: httpx.AsyncClient, keys: set[Key]) -> None:
    """Pods first and at once (grace 0: what a test left needs no graceful end), namespaces last."""

    def rank(key: Key) -> int:
        resource = _resource(key[0])
        return 0 if resource == "pods" else 2 if resource == "namespaces" else 1

    # a test's events, hundreds of them, go a namespace at a time
    events = {key for key in keys if _resource(key[0]) == "events"}
    urls = [f"/api/v1/namespaces/{namespace}/events" for namespace in sorted({key[1] for key in events})]
    urls += [_item_url(key) for key in sorted(keys - events, key=rank)]
    for url in urls:
        params = {"gracePeriodSeconds": "0"} if "/pods/" in url else {}
        response = await client.delete(url, params=params)
        if response.status_code not in (200, 202, 404, 409):
            log.info("kube tier reset: DELETE %s: %s %s", url, response.status_code, response.text[:200])


def _describe(left: dict[str, set[Key]], running: dict[str, Any]) -> str:
    parts = [f"{site}: {', '.join(sorted(f'{_resource(k[0])} {k[1]}/{k[2]}' for k in keys)[:5])}" for site, keys in left.items()]
    parts += [f"{site}'s kubelet runs {sorted(processes)[:5]}" for site, processes in running.items() if processes]
    return "; ".join(parts)
