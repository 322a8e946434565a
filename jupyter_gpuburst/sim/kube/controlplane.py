"""One site's real control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Started as local processes from the binaries ``tools/kube/build`` made (``binaries.locate``), on
127.0.0.1 ports of their own, with a PKI of their own (``pki``). The API server runs as clusters
are configured in production, at the settings this product meets there: Node and RBAC
authorization, the default admission plugins (PodSecurity, Priority, ServiceAccount, ...),
service-account tokens signed by the API server (so TokenRequest works), and an audit log (JSON,
``audit.log``) recording every request made by anyone but the control plane's own components and
this harness, which is the ground truth of what the hub did. etcd keeps its data without fsync:
a control plane here lives for a test run or a demo.

Every process dies with its parent (``PR_SET_PDEATHSIG``), so a harness killed with SIGKILL
leaves no control plane behind; ``stop()`` ends them in reverse order of start.

Faults (the chaos benchmark on the real control plane): ``kill_process`` ends one component
with a signal of the caller's choosing (SIGKILL: a crash; SIGSTOP: a hung process, until
``resume_process``), and ``start_process`` starts it again with its own arguments, on the same
data dir, certificates and ports, waiting until it is healthy; ``lose()`` kills every process
at once, as a site that went away, and ``recover()`` starts them again in order.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from jupyter_gpuburst.hub.ports import free_ports
from jupyter_gpuburst.sim.kube import binaries
from jupyter_gpuburst.sim.kube.pki import ClientCert, Pki

log = logging.getLogger(__name__)
HARNESS_USER = "gpuburst-harness"  # the federation's own client: system:masters, never audited
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"  # kube-apiserver at the kubelets (kubeadm's name)
SERVICE_CIDR = "10.96.0.0/16"
START_TIMEOUT_S = 90.0  # a cold kube-apiserver on a loaded 2-core machine takes 10-30 s
STOP_GRACE_S = 10.0
# kube-apiserver's own deadline for a request (its --request-timeout default): a client that gives
# up sooner abandons a write the server still performs, as a 10 s wait for a CRD's POST did on a
# loaded machine while both tiers ran. kubectl waits for the server's answer (its own
# --request-timeout is 0); the harness's writes wait as long as the server may take.
REQUEST_TIMEOUT_S = 60.0
# Go's collector at its default (GOGC=100) took a fifth of a control plane's start: two sites'
# components took 14.1 CPU-s to start, and 11.5 at GOGC=400 (three interleaved starts each), for
# about 230 MB more per API server. A control plane here lives for a test or a demo, on a
# machine whose CPU the tests share, so CPU is the scarcer of the two. A GOGC already set wins.
GO_GC_PERCENT = "400"
_PR_SET_PDEATHSIG = 1

# What is audited: every request but the control plane's own and the harness's, at Metadata
# (verb, resource, subresource, namespace, user, response code, admission's annotations such as
# Pod Security's audit violations), and the bodies of writes (Request: what the client sent,
# never the response) so that each can be replayed under strict field validation; never the
# bodies of Secrets, which hold kernels' keys.
WRITES = ["create", "update", "patch"]
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "None",
            "users": [
                HARNESS_USER,
                "system:apiserver",
                "system:kube-scheduler",
                "system:kube-controller-manager",
            ],
        },
        {"level": "None", "userGroups": ["system:nodes", "system:serviceaccounts:kube-system"]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version", "/metrics"]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets"]}]},
        {"level": "Request", "verbs": WRITES},
        {"level": "Metadata"},
    ],
}


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it exits, however it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def kubeconfig_for(path: Path, url: str, ca: Path, client: ClientCert | None = None, token: str | None = None) -> Path:
    """A kubeconfig (mode 0600) for ``url`` as a client certificate or a bearer token."""
    user: dict = {}
    if client is not None:
        user = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    elif token is not None:
        user = {"token": token}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": "local", "user": user}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
        "current-context": "local",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return path


@dataclass
class _Process:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path


# the components in the order they start: each needs the one before it
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass
class ControlPlane:
    """A control plane for the site ``name``, its files under ``state_dir/name``.

    ``async with ControlPlane(...) as cp:`` or ``await cp.start()`` / ``await cp.stop()``;
    ``cp.url`` is the API server, ``cp.admin_kubeconfig`` the harness's kubeconfig.
    """

    name: str
    state_dir: Path
    bin_dir: Path | None = None
    node_monitor_grace_s: int = 40  # kube-controller-manager's default
    _procs: list[_Process] = field(default_factory=list, init=False)
    _args: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.dir = Path(self.state_dir) / self.name
        self.bin_dir = Path(self.bin_dir) if self.bin_dir else binaries.locate()
        etcd_client, etcd_peer, api, scheduler, controllers = free_ports(5)
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        self._etcd_peer_url = f"http://127.0.0.1:{etcd_peer}"
        self.port = api
        self.url = f"https://127.0.0.1:{api}"
        self._scheduler_port = scheduler
        self._controllers_port = controllers
        self.audit_log = self.dir / "audit.log"

    async def __aenter__(self) -> ControlPlane:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # -- files -------------------------------------------------------------------------------

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = Pki(self.dir / "pki")
        self.serving = self.pki.serving("apiserver", ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc"])
        self.harness_cert = self.pki.client("harness", HARNESS_USER, ("system:masters",))
        # kube-apiserver's identity at the nodes' kubelet API (pods/exec, pods/log: kubeletapi.py)
        self.kubelet_client_cert = self.pki.client("apiserver-kubelet-client", KUBELET_CLIENT_USER)
        self.admin_kubeconfig = kubeconfig_for(self.dir / "admin.kubeconfig", self.url, self.pki.ca, self.harness_cert)
        self._component_kubeconfigs = {
            "kube-scheduler": kubeconfig_for(
                self.dir / "scheduler.kubeconfig", self.url, self.pki.ca, self.pki.client("scheduler", "system:kube-scheduler")
            ),
            "kube-controller-manager": kubeconfig_for(
                self.dir / "controller-manager.kubeconfig",
                self.url,
                self.pki.ca,
                self.pki.client("controller-manager", "system:kube-controller-manager"),
            ),
        }
        self._audit_policy = self.dir / "audit-policy.yaml"
        self._audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))

    # -- processes ---------------------------------------------------------------------------

    async def _spawn(self, name: str, *args: str) -> _Process:
        self._args[name] = args  # to start it again as it was (faults)
        log_path = self.dir / f"{name}.log"
        fh = open(log_path, "ab")  # noqa: SIM115 - the child keeps the descriptor
        try:
            proc = await asyncio.create_subprocess_exec(
                str(self.bin_dir / name),
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=fh,
                stderr=fh,
                env={"GOGC": GO_GC_PERCENT, **os.environ},
                preexec_fn=_die_with_parent,
            )
        finally:
            fh.close()
        entry = _Process(name, proc, log_path)
        self._procs.append(entry)
        return entry

    def harness_client(self, timeout: float = 5.0) -> httpx.AsyncClient:
        """An HTTP client of this API server (its URL the base) acting as the harness."""
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.harness_cert.cert), str(self.harness_cert.key))
        return httpx.AsyncClient(base_url=self.url, verify=context, timeout=timeout)

    async def _wait_healthy(self, entry: _Process, url: str, client: httpx.AsyncClient, deadline: float) -> None:
        while True:
            if entry.proc.returncode is not None:
                raise RuntimeError(
                    f"{entry.name} exited with status {entry.proc.returncode}; its log: {entry.log_path}\n{_tail(entry.log_path)}"
                )
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{entry.name} was not healthy at {url} within {START_TIMEOUT_S:.0f} s; its log: {entry.log_path}\n{_tail(entry.log_path)}"
                )
            await asyncio.sleep(0.2)

    def _health_url(self, name: str) -> str:
        return {
            "etcd": f"{self.etcd_url}/health",
            "kube-apiserver": f"{self.url}/readyz",
            "kube-controller-manager": f"https://127.0.0.1:{self._controllers_port}/healthz",
            "kube-scheduler": f"https://127.0.0.1:{self._scheduler_port}/healthz",
        }[name]

    def _health_client(self, name: str) -> httpx.AsyncClient:
        if name == "etcd":
            return httpx.AsyncClient(timeout=5.0)
        if name == "kube-apiserver":
            return self.harness_client()
        # both serve /healthz to anyone (authorization-always-allow-paths) with a self-signed cert
        return httpx.AsyncClient(verify=False, timeout=5.0)  # noqa: S501 - a loopback health probe

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self._prepare()
        deadline = time.monotonic() + START_TIMEOUT_S
        etcd = await self._spawn(
            "etcd",
            f"--name={self.name}",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={self._etcd_peer_url}",
            f"--initial-advertise-peer-urls={self._etcd_peer_url}",
            f"--initial-cluster={self.name}={self._etcd_peer_url}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        )
        async with httpx.AsyncClient(timeout=5.0) as plain:
            await self._wait_healthy(etcd, f"{self.etcd_url}/health", plain, deadline)
        apiserver = await self._spawn(
            "kube-apiserver",
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.pki.ca}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # the `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints refuse (loopback)
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={self._audit_policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxbackup=0",
            "--profiling=false",
            f"--kubelet-client-certificate={self.kubelet_client_cert.cert}",
            f"--kubelet-client-key={self.kubelet_client_cert.key}",
            # the nodes report an InternalIP and a Hostname no resolver here knows
            "--kubelet-preferred-address-types=InternalIP",
        )
        async with self.harness_client() as client:
            await self._wait_healthy(apiserver, f"{self.url}/readyz", client, deadline)
            controllers = await self._spawn(
                "kube-controller-manager",
                f"--kubeconfig={self._component_kubeconfigs['kube-controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._controllers_port}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--leader-elect=false",
                f"--node-monitor-grace-period={self.node_monitor_grace_s}s",
                "--profiling=false",
            )
            scheduler = await self._spawn(
                "kube-scheduler",
                f"--kubeconfig={self._component_kubeconfigs['kube-scheduler']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._scheduler_port}",
                "--leader-elect=false",
                "--profiling=false",
            )
            # both serve /healthz to anyone (authorization-always-allow-paths) with a self-signed cert
            async with httpx.AsyncClient(verify=False, timeout=5.0) as insecure:  # noqa: S501 - a loopback health probe
                await self._wait_healthy(controllers, f"https://127.0.0.1:{self._controllers_port}/healthz", insecure, deadline)
                await self._wait_healthy(scheduler, f"https://127.0.0.1:{self._scheduler_port}/healthz", insecure, deadline)
        log.info("control plane %s ready at %s", self.name, self.url)

    async def stop_process(self, name: str) -> None:
        """Stop one component (faults: etcd down, the API server restarted)."""
        for entry in [p for p in self._procs if p.name == name]:
            await _terminate(entry)
            self._procs.remove(entry)

    def _entry(self, name: str) -> _Process:
        if name not in COMPONENTS:
            raise ValueError(f"no component {name!r}; the control plane's: {', '.join(COMPONENTS)}")
        for entry in self._procs:
            if entry.name == name:
                return entry
        raise RuntimeError(f"{name} of {self.name} is not running")

    async def kill_process(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to one component: SIGKILL (or SIGTERM) ends it, and it stays down until
        ``start_process``; SIGSTOP freezes it, sockets open, until ``resume_process``."""
        entry = self._entry(name)
        if entry.proc.returncode is None:
            entry.proc.send_signal(sig)
        if sig in (signal.SIGSTOP, signal.SIGTSTP):
            return
        await entry.proc.wait()
        self._procs.remove(entry)

    def resume_process(self, name: str) -> None:
        entry = self._entry(name)
        if entry.proc.returncode is None:
            entry.proc.send_signal(signal.SIGCONT)

    async def start_process(self, name: str) -> None:
        """Start a component that was ended, with its own arguments, and wait until it is healthy
        (on a loaded machine a kube-apiserver takes 10-30 s to become ready again)."""
        if name not in self._args:
            raise RuntimeError(f"{name} of {self.name} never ran: start() the control plane first")
        if any(p.name == name for p in self._procs):
            raise RuntimeError(f"{name} of {self.name} is already running")
        entry = await self._spawn(name, *self._args[name])
        async with self._health_client(name) as client:
            await self._wait_healthy(entry, self._health_url(name), client, time.monotonic() + START_TIMEOUT_S)
        log.info("%s of %s started again", name, self.name)

    async def lose(self) -> None:
        """Every process SIGKILLed at once: the site is gone (its data dir and certificates stay)."""
        for entry in list(self._procs):
            if entry.proc.returncode is None:
                entry.proc.kill()
        for entry in list(self._procs):
            await entry.proc.wait()
        self._procs.clear()

    async def recover(self) -> None:
        """Start again, in order, every component that is not running (after ``lose``)."""
        for name in COMPONENTS:
            if not any(p.name == name for p in self._procs):
                await self.start_process(name)

    async def stop(self) -> None:
        for entry in reversed(self._procs):
            await _terminate(entry)
        self._procs.clear()

    def pids(self) -> list[int]:
        return [p.proc.pid for p in self._procs if p.proc.returncode is None]


async def _terminate(entry: _Process) -> None:
    if entry.proc.returncode is not None:
        return
    entry.proc.terminate()
    try:
        await asyncio.wait_for(entry.proc.wait(), STOP_GRACE_S)
    except asyncio.TimeoutError:
        log.warning("%s did not stop within %.0f s of SIGTERM: killed", entry.name, STOP_GRACE_S)
        entry.proc.kill()
        await entry.proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
