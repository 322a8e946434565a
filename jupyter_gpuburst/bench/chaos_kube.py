"""`gpuburst bench chaos --control-plane kube`: the same students and checks, on real control planes.

Every site, the origin and the donor, runs its own etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (``sim/kube``), and the hub acts as its ServiceAccount under the shipped RBAC,
as a production install has it (``sim/kube/deployment.py``). The faults are the control planes'
own processes failing (``FaultSchedule.kube_chaos``):

- ``etcd_down``: the origin's etcd SIGKILLed, and started again on its data dir 8 s later; the
  API server answers errors meanwhile and every watch on it breaks;
- ``apiserver_restart``: the origin's kube-apiserver SIGKILLed and started again at once (it
  takes 10-30 s to be ready on a loaded machine); every client, the hub's and the node agents',
  loses its watches and must resume them or list again (410 Gone);
- ``donor_control_plane_lost``: every control-plane process of the donor SIGKILLed while
  servers run there, and the kernel students' GPU kernels that have run a cell
  (``chaos_kernels``), the donor's virtual node NotReady (as Liqo's virtual kubelet reports a
  foreign cluster it cannot reach), and after ``duration_s`` the donor's admin starts it again
  on its data dir; the servers' and kernels' processes, run by the donor's node agent, keep
  running. It waits, up to ``SERVERS_WAIT_S``, for a server (and such a kernel) to run there
  first: the origin's outages hold spawns back, by seconds or tens of seconds as the machine is
  loaded.

The emulator's answer-level faults (429/500 bursts, dropped watches, expired history) have no
place here: what fails is what fails in a cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from jupyter_gpuburst.bench import chaos_kernels
from jupyter_gpuburst.bench.chaos_count import SERVER_COMPONENT
from jupyter_gpuburst.bench.spawn import NAMESPACE
from jupyter_gpuburst.sim.faults import FaultStep
from jupyter_gpuburst.sim.federation import Federation

SERVERS_WAIT_S = 60.0  # how long the donor's loss waits for a server to run there


def unavailable() -> str | None:
    """Why the benchmark cannot run on the real control plane here (one line), or None."""
    from jupyter_gpuburst.sim.kube import deployment

    return deployment.unavailable()


def hub_kubeconfig(fed: Federation, workdir: Path) -> Path:
    """Install on the origin as docs/install.md asks an admin to, and the hub's ServiceAccount's
    kubeconfig (the hub never holds the federation's admin certificate)."""
    from jupyter_gpuburst.sim.kube import deployment

    workdir.mkdir(parents=True, exist_ok=True)
    return deployment.hub_kubeconfig(fed.origin, workdir, users=NAMESPACE, donors=fed.donors)


def running_on(fed: Federation, node: str) -> int:
    """Servers' pods running on ``node`` now, as the origin sees them (what a lost donor holds)."""
    pods, _ = fed.origin.store.list(
        "pods", NAMESPACE, label_selector=f"component={SERVER_COMPONENT}", field_selector=f"spec.nodeName={node}"
    )
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))


async def until_running_on(fed: Federation, node: str, timeout: float, kernels: Callable[[], Collection[str]] | None = None) -> float:
    """Wait until a server, and with ``kernels`` one of the students' working GPU kernels that
    it gives too, runs on ``node`` (at most ``timeout``); how long it took."""
    started = time.monotonic()

    def there() -> bool:
        return running_on(fed, node) > 0 and (kernels is None or chaos_kernels.running_on(fed, node, kernels()) > 0)

    while not there() and time.monotonic() - started < timeout:
        await asyncio.sleep(0.5)
    return time.monotonic() - started


def actions(fed: Federation, notes: list[dict[str, Any]], kernels: Callable[[], Collection[str]] | None = None) -> dict[str, Any]:
    """The real control plane's fault steps; what each did goes to ``notes`` (the JSON's
    ``kube_faults``). With ``kernels`` (the hub's ids of the students' GPU kernels that have run
    a cell), the donor's loss waits for one of them to run there too."""
    origin = fed.origin.control_plane  # type: ignore[attr-defined] - a KubeSite's

    async def etcd_down(step: FaultStep) -> None:
        await origin.kill_process("etcd")
        started = time.monotonic()
        try:
            await asyncio.sleep(step.duration_s)
        finally:
            await origin.start_process("etcd")
            notes.append({"fault": "etcd_down", "down_s": round(time.monotonic() - started, 1)})

    async def apiserver_restart(step: FaultStep) -> None:
        await origin.kill_process("kube-apiserver")
        started = time.monotonic()
        await origin.start_process("kube-apiserver")
        notes.append({"fault": "apiserver_restart", "down_s": round(time.monotonic() - started, 1)})

    async def donor_control_plane_lost(step: FaultStep) -> None:
        donor_id = str(step.params.get("donor") or next(iter(fed.donors)))
        peering = fed.peerings[donor_id]
        # the loss is of a donor with servers on it: on a loaded machine the spawns that the
        # origin's outages held back may reach it seconds after the schedule's time
        waited = await until_running_on(fed, peering.node_name, SERVERS_WAIT_S, kernels)
        running = running_on(fed, peering.node_name)
        kernels_there = chaos_kernels.running_on(fed, peering.node_name, kernels()) if kernels else 0
        await fed.donor_outage(donor_id, True)  # its virtual node NotReady, as Liqo's virtual kubelet says
        started = time.monotonic()
        try:
            await asyncio.sleep(step.duration_s)
        finally:
            await fed.donor_outage(donor_id, False)
            notes.append(
                {
                    "fault": "donor_control_plane_lost",
                    "donor": donor_id,
                    "servers_running_there": running,
                    "gpu_kernels_running_there": kernels_there,
                    "waited_for_them_s": round(waited, 1),
                    "down_s": round(time.monotonic() - started, 1),
                }
            )

    return {"etcd_down": etcd_down, "apiserver_restart": apiserver_restart, "donor_control_plane_lost": donor_control_plane_lost}
