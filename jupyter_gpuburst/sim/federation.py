"""The local federation: the origin cluster, its donors and the peerings between them."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.config import FederationConfig, load_config
from jupyter_gpuburst.sim.faults import Faults
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.peering import Peering

CONTROL_PLANES = ("emulator", "kube")
# the taints the node lifecycle controller keeps on a node while it is not (yet) Ready
CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
NODES_ADMITTED_TIMEOUT_S = 60.0


class Federation:
    """Origin + donors, each with its own API server on 127.0.0.1; donors peered to the origin.

    Use ``async with Federation(config) as fed:`` or ``await start()`` / ``await stop()``.
    Pod working directories and logs live under ``state_dir`` (a temp dir removed on stop when
    not given). ``faults`` injects API faults per cluster name (reliability tests).
    """

    def __init__(
        self,
        config: FederationConfig | None = None,
        state_dir: str | Path | None = None,
        faults: Mapping[str, Faults] | None = None,
        control_plane: str = "emulator",
    ):
        if control_plane not in CONTROL_PLANES:
            raise ValueError(f"control plane {control_plane!r} is not one of {', '.join(CONTROL_PLANES)}")
        if control_plane == "kube" and faults:
            raise ValueError("API faults are the emulator's; the real control plane's faults are its processes' (see sim/kube)")
        self.control_plane = control_plane
        self.config = config or load_config()
        faults = dict(faults or {})
        unknown = set(faults) - {self.config.origin.name, *(d.cluster.name for d in self.config.donors)}
        if unknown:
            raise ValueError(f"faults given for unknown clusters: {', '.join(sorted(unknown))}")
        self._own_state = state_dir is None
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="gpuburst-sim-"))
        self.origin = self._site(self.config.origin, 0, faults.get(self.config.origin.name))
        self.donors: dict[str, Cluster] = {}
        self.peerings: dict[str, Peering] = {}
        for i, donor in enumerate(self.config.donors, start=1):
            cluster = self._site(donor.cluster, i, faults.get(donor.cluster.name))
            self.donors[cluster.cluster_id] = cluster
            self.peerings[cluster.cluster_id] = Peering(self.origin, cluster, donor.grant, str(next(self.origin._node_ips)))
        self.started = False

    def _site(self, config, index: int, faults: Faults | None) -> Cluster:
        if self.control_plane == "kube":
            from jupyter_gpuburst.sim.kube.site import KubeSite  # needs the built control plane, not the emulator

            return KubeSite(config, index, self.state_dir)  # type: ignore[return-value] - Cluster's surface
        return Cluster(config, index, self.state_dir, faults=faults)

    @property
    def clusters(self) -> dict[str, Cluster]:
        """Every cluster by name (origin first)."""
        return {self.origin.name: self.origin, **{c.name: c for c in self.donors.values()}}

    def contexts(self) -> dict[str, str]:
        """kubeconfig contexts: cluster name -> API server URL."""
        return {name: c.url for name, c in self.clusters.items()}

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """A kubeconfig with a context per cluster: the emulator's open endpoints, or on the real
        control plane each site's CA and the federation's own (cluster-admin) certificate."""
        if self.control_plane == "kube":
            from jupyter_gpuburst.sim.kube.credentials import write_admin_kubeconfig

            return write_admin_kubeconfig(path, self.clusters, self.origin.name, namespace)  # type: ignore[arg-type]
        return write_kubeconfig(path, self.contexts(), self.origin.name, namespace)

    async def start(self) -> None:
        try:
            if self.control_plane == "kube":
                await self._start_sites_at_once()
            else:
                await self.origin.start()
                for cluster in self.donors.values():
                    await cluster.start()
            for peering in self.peerings.values():
                await peering.start()
            if self.control_plane == "kube":
                await self._nodes_admitted()
        except BaseException:
            await self.stop()
            raise
        self.started = True

    async def _start_sites_at_once(self) -> None:
        """Real control planes start side by side: much of each start is waiting on its own
        processes (etcd, then kube-apiserver's readiness). Every start runs to its end before the
        first failure is raised, so ``stop()`` never meets a site still starting."""
        results = await asyncio.gather(*(site.start() for site in self.clusters.values()), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _nodes_admitted(self, timeout_s: float = NODES_ADMITTED_TIMEOUT_S) -> None:
        """Wait until no node of any site carries a not-ready or unreachable taint.

        kube-apiserver's TaintNodesByCondition admission taints every new node
        ``node.kubernetes.io/not-ready:NoSchedule``, and kube-controller-manager's node lifecycle
        controller lifts it once it has read the node Ready: until then kube-scheduler passes the
        node by and the hub counts none of its GPUs. On a loaded machine that took seconds after
        the sites had started (``gpuburst doctor`` saw both sites without a free GPU)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            tainted = [
                node["metadata"]["name"]
                for site in self.clusters.values()
                for node in site.store.list("nodes")[0]
                if any(t.get("key") in CONDITION_TAINTS for t in (node.get("spec") or {}).get("taints") or [])
            ]
            if not tainted:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"nodes still tainted not ready {timeout_s:.0f} s after start: {', '.join(sorted(tainted))}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """Stop everything: peerings, then clusters (their pod processes are killed)."""
        for peering in self.peerings.values():
            await peering.stop()
        for cluster in [*self.donors.values(), self.origin]:
            await cluster.stop()
        self.started = False
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    async def donor_outage(self, cluster_id: str, down: bool = True) -> None:
        """Make a donor unreachable or bring it back: its API server stops (on the real control
        plane, every control-plane process is SIGKILLed; its node agent and pods run on), and its
        virtual node turns NotReady, as Liqo's virtual kubelet reports a foreign cluster it cannot
        reach."""
        donor, peering = self.donors[cluster_id], self.peerings[cluster_id]
        if self.control_plane == "kube":
            control_plane = donor.control_plane  # type: ignore[attr-defined] - a KubeSite's
            await (control_plane.lose() if down else control_plane.recover())
        else:
            await (donor.api.stop() if down else donor.api.start())
        peering.set_ready(not down)

    async def __aenter__(self) -> Federation:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()
