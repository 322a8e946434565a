"""Kernel students in `gpuburst bench chaos`: a CPU server at home and a GPU kernel on the donor, through the faults.

Each kernel student starts a CPU server (the ``cpu`` profile, which stays on the origin) as the
other students start theirs, then asks the hub's GPU kernel API for a kernel as their server's
provisioner asks (``server/kernels/provisioner.py``), and runs a first cell on it. The kernel
profile is allowed on the donor only (``allowed_sites``), so that the donor's loss always finds
kernels running there: where a kernel goes is what the placement tests check, not this.

They act as the provisioner does when the hub goes away under it: a start the hub did not answer
(killed mid-request, or its proxy with nothing behind it) fails the notebook's kernel; a wait
that is cut makes it ask the hub to delete that start, which may fail too. The student then
restarts the kernel, as JupyterLab's "Restart" does: the same kernel id and key. So do they
after a start the hub refused for now (no GPU or no cluster to be had: 5xx) or that failed
while starting, up to ``--attempts`` starts; a refusal of another kind (4xx) is final. The last
refusal's reason is what a refused student read.

After the faults, with the donor back, each kernel that ran must still run: the hub's record
says ``running`` on the donor, its pod on the origin is the pod that answered the first cell
(same uid), and it answers a cell again. Counted from what exists, never from what the hub says:
kernel pods on the origin (every namespace: a donor's kernels have a namespace of their own)
and their twins on the donor.

- ``lost``: a kernel student whose kernel never ran, or no longer runs in the pod it ran in;
- ``duplicated``: kernel pods of a student beyond one, twins on a donor beyond one per pod;
- ``orphaned``: kernel pods that no student's running kernel accounts for (a start the hub made
  but its student never heard of), and twins on a donor without their origin pod.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from jupyter_gpuburst.bench.kernel_client import KERNEL_SCOPES, STANDIN_KERNEL, run_cell
from jupyter_gpuburst.bench.spawn import GPU, NAMESPACE
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.kernels.manifests import donor_kernel_namespace

CPU_SERVER = "cpu"  # the server profile that stays home
KERNEL_PROFILE = "gpu-1-donor"
GROUP = "chaos-kernel-students"
CPU_SERVER_PROFILE = {
    "display_name": "CPU server with GPU kernels",
    "slug": CPU_SERVER,
    "kubespawner_override": {"cpu_guarantee": 0.5, "mem_guarantee": "1G"},
}
# the students' kernel pods: the hub's GPU kernels, pre-started ones still waiting in a pool aside
STUDENT_KERNELS = f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT},!{keys.POOL_LABEL}"
WAIT_STEP_S = 5.0
RESTART_AFTER_S = 3.0  # a student reading why their kernel did not start, then restarting it


def donor_namespace(donor: str) -> str:
    """Where the hub runs the students' GPU kernels that it places on ``donor``."""
    return donor_kernel_namespace(NAMESPACE, donor)


def config_lines(users: list[str], donor: str, start_timeout: int) -> str:
    """The hub's config for kernel students (after ``spawn.hub_config``'s), or "" for none."""
    if not users:
        return ""
    profile = {"slug": KERNEL_PROFILE, "resource": GPU, "count": 1, "allowed_sites": [donor], "cpu": "1", "memory": "1G"}
    return f"""
c.KubeSpawner.profile_list = list(c.KubeSpawner.profile_list) + [{CPU_SERVER_PROFILE!r}]
c.JupyterHub.load_groups = {{{GROUP!r}: {{"users": {users!r}}}}}
c.JupyterHub.load_roles.append({{"name": "chaos-gpu-kernels", "scopes": {KERNEL_SCOPES!r}, "groups": [{GROUP!r}]}})
c.GPUKernelSettings.profiles = [{profile!r}]
c.GPUKernelSettings.command = {STANDIN_KERNEL!r}
c.GPUKernelSettings.start_timeout = {float(start_timeout)!r}
"""


@dataclass
class KernelStart:
    """One kernel student's GPU kernel, from their side."""

    user: str
    outcome: str = "none"  # ran | refused | lost
    message: str = ""
    starts: int = 0
    record: str | None = None  # the hub's id of the start that ran
    site: str | None = None
    pod_uid: str | None = None  # the origin pod that answered the first cell
    key: str = ""
    trace: list[tuple[float, str]] = field(default_factory=list)  # (seconds since it began, what)
    began: float = field(default_factory=time.monotonic)

    def note(self, what: str) -> None:
        self.trace.append((round(time.monotonic() - self.began, 2), what))


class HubGone(Exception):
    """The hub did not answer: no connection, or its proxy with nothing behind it."""


async def _ask(session: aiohttp.ClientSession, method: str, url: str, token: str, **kwargs: Any) -> tuple[int, Any]:
    try:
        async with session.request(method, url, headers={"Authorization": f"token {token}"}, **kwargs) as resp:
            body = await resp.json(content_type=None) if resp.content_type == "application/json" else None
            if resp.status in (502, 503, 504) and not (isinstance(body, dict) and body.get("message")):
                raise HubGone(f"HTTP {resp.status}")  # the proxy's own page: no hub behind it
            return resp.status, body
    except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, ValueError) as exc:
        raise HubGone(type(exc).__name__) from None


def kernel_pod(fed: Any, record_id: str) -> dict[str, Any] | None:
    """The origin's pod of the hub's kernel ``record_id`` (any namespace), if one exists."""
    pods, _ = fed.origin.store.list("pods", label_selector=f"{keys.KERNEL_LABEL}={record_id}")
    return pods[0] if pods else None


async def start_kernel(
    hub: Any, session: aiohttp.ClientSession, fed: Any, k: KernelStart, token: str, attempts: int, deadline: float
) -> None:
    """Start ``k.user``'s GPU kernel and run its first cell, restarting it when a start is cut."""
    api = f"{hub.process.url}/services/gpuburst/api/kernels"
    kernel_id = str(uuid.uuid4())
    k.key = secrets.token_hex(32)  # the kernel manager's session key, kept across its restarts
    while time.monotonic() < deadline:
        if k.starts >= attempts:
            if k.outcome != "refused":  # the last start's reason stands, if it had one
                k.outcome, k.message = "lost", f"no kernel after {attempts} starts"
            return
        while not hub.up.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        k.starts += 1
        body = {"profile": KERNEL_PROFILE, "key": k.key, "signature_scheme": "hmac-sha256", "kernel_id": kernel_id, "server_name": ""}
        try:
            status, record = await _ask(session, "POST", api, token, json=body)
        except HubGone as exc:
            k.note(f"start cut: {exc}")
            continue  # the notebook's kernel failed to start: restarted
        if status != 202 or not isinstance(record, dict):
            # no reason in the answer: what the student read is no reason either (is_clear says so)
            k.outcome, k.message = "refused", (str(record.get("message") or "") if isinstance(record, dict) else "")
            if status >= 500:  # no GPU or no cluster just now: the dialog's reason read, restarted
                k.note(f"refused, HTTP {status}: {k.message[:80]}")
                await asyncio.sleep(RESTART_AFTER_S)
                continue
            return
        record_id = str(record["id"])
        k.note(f"started {record_id} on {record.get('site')}")
        try:
            while record.get("state") == "pending" and time.monotonic() < deadline:
                status, record = await _ask(session, "GET", f"{api}/{record_id}", token, params={"wait": str(WAIT_STEP_S)})
                if status != 200 or not isinstance(record, dict):
                    raise HubGone(f"HTTP {status}")
        except HubGone as exc:
            k.note(f"wait cut: {exc}")
            try:  # as the provisioner does: the start it gives up is deleted, if the hub hears
                await _ask(session, "DELETE", f"{api}/{record_id}", token)
            except HubGone:
                k.note("delete cut")
            continue
        if record.get("state") != "running":
            k.outcome, k.message = "refused", str(record.get("error") or f"the GPU kernel is {record.get('state')}")
            k.note(f"failed: {k.message[:80]}")
            await asyncio.sleep(RESTART_AFTER_S)
            continue
        k.record, k.site = record["id"], record.get("site")
        pod = kernel_pod(fed, k.record)
        k.pod_uid = pod["metadata"]["uid"] if pod else None
        if await run_cell(record["connection"], k.key, deadline):
            k.outcome = "ran"
            k.note("first cell answered")
        else:
            k.outcome, k.message = "lost", "the first cell got no reply"
        return
    k.outcome, k.message = "lost", "no kernel before the run's deadline"


async def still_runs(hub: Any, session: aiohttp.ClientSession, fed: Any, k: KernelStart, token: str, timeout: float = 60.0) -> str:
    """Why ``k``'s kernel that ran no longer does, after the faults ("" when it still runs)."""
    deadline = time.monotonic() + timeout
    try:
        status, record = await _ask(session, "GET", f"{hub.process.url}/services/gpuburst/api/kernels/{k.record}", token)
    except HubGone as exc:
        return f"the hub did not answer: {exc}"
    if status != 200 or not isinstance(record, dict) or record.get("state") != "running":
        return f"the hub's record: HTTP {status}, {(record or {}).get('state') if isinstance(record, dict) else record}"
    pod = kernel_pod(fed, k.record)
    if pod is None or pod["metadata"]["uid"] != k.pod_uid:
        return "its pod is gone or was replaced"
    if not await run_cell(record["connection"], k.key, deadline, code="print(1)"):
        return "a cell got no reply"
    return ""


def _alive(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def kernel_pods(fed: Any) -> tuple[list[dict[str, Any]], int, int]:
    """Students' kernel pods alive on the origin; donor twins beyond one per pod; donor twins
    without their origin pod."""
    pods = [p for p in fed.origin.store.list("pods", label_selector=STUDENT_KERNELS)[0] if _alive(p)]
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}
    twins: Counter[tuple[str, str]] = Counter()
    orphans = 0
    for donor_id, donor in fed.donors.items():
        peering = fed.peerings[donor_id]
        local = {peering.remote_namespace(ns): ns for ns, _ in names}
        for twin in donor.store.list("pods", label_selector=STUDENT_KERNELS)[0]:
            if not _alive(twin):
                continue
            origin_ns = local.get(twin["metadata"]["namespace"])
            if origin_ns is None or (origin_ns, twin["metadata"]["name"]) not in names:
                orphans += 1
                continue
            twins[(origin_ns, twin["metadata"]["name"])] += 1
    return pods, sum(n - 1 for n in twins.values() if n > 1), orphans


async def count(
    hub: Any, session: aiohttp.ClientSession, fed: Any, starts: list[KernelStart], tokens: dict[str, str], is_clear: Callable[[str], bool]
) -> dict[str, Any]:
    """The kernel students' counts, read once the phase has settled (see the module docstring);
    a refusal counts as one only when ``is_clear`` finds its reason one a student can read."""
    if not starts:
        return {"students": 0}
    pods, extra_twins, donor_orphans = kernel_pods(fed)
    by_record: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_record.setdefault((pod["metadata"].get("labels") or {}).get(keys.KERNEL_LABEL, ""), []).append(pod)
    ran = lost = refused = on_donor = 0
    lost_detail: list[dict[str, Any]] = []
    for k in starts:
        if k.outcome == "refused" and is_clear(k.message):
            refused += 1
            continue
        if k.outcome == "refused":
            why = f"an unclear refusal: {k.message}"
        else:
            why = k.message if k.outcome != "ran" else await still_runs(hub, session, fed, k, tokens[k.user])
        if why:
            lost += 1
            lost_detail.append({"user": k.user, "why": why[:160], "starts": k.starts, "trace": k.trace})
            continue
        ran += 1
        on_donor += k.site is not None and k.site != "origin"
    accounted = working(starts)
    duplicated = sum(len(p) - 1 for p in by_record.values() if len(p) > 1) + extra_twins
    orphaned = sum(len(p) for record, p in by_record.items() if record not in accounted) + donor_orphans
    return {
        "students": len(starts),
        "ran": ran,
        "refused": refused,
        "lost": lost,
        "duplicated": duplicated,
        "orphaned": orphaned,
        "on_donor": on_donor,
        "starts": sum(k.starts for k in starts),
        "refused_reasons": [k.message[:160] for k in starts if k.outcome == "refused"][:3],
        "lost_detail": lost_detail[:5],
    }


def running_on(fed: Any, node: str, records: Collection[str]) -> int:
    """How many of the hub's kernels ``records`` run on ``node`` now, as the origin sees them."""
    pods, _ = fed.origin.store.list("pods", label_selector=STUDENT_KERNELS, field_selector=f"spec.nodeName={node}")
    return sum(
        1
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and _alive(p)
        and (p["metadata"].get("labels") or {}).get(keys.KERNEL_LABEL) in records
    )


def working(starts: list[KernelStart]) -> set[str]:
    """The hub's ids of the students' kernels that answered their first cell."""
    return {k.record for k in starts if k.outcome == "ran" and k.record}
