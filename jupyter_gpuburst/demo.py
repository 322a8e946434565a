"""`gpuburst demo`: the local federation, JupyterHub with GPUBurstSpawner, and its proxy.

One command a student or an admin can try on a laptop:

- the federation runs in this process (origin with GPUs and a MIG-partitioned GPU, N donors
  peered through the Liqo emulation, each granting its GPUs);
- JupyterHub runs as a child process with ``jupyter_gpuburst/demo_config.py`` (shipped in the
  package, so the demo runs from an installed wheel), in its own session so
  that Ctrl-C reaches this process only and the shutdown happens in order;
- the hub starts its proxy, JupyterHub's own ``configurable-http-proxy`` from npm, installed
  in ``node_modules`` by the same ``npm ci`` that builds the Lab extension;
- user servers are pods, run by the federation's kubelet as local processes, with the server
  extension on simulated GPUs; on a machine with NVIDIA GPUs (``--gpus auto``, the default) the
  origin's GPU node has this machine's GPUs instead, handed to pods one each by the kubelet, and
  servers and GPU kernels there read them through NVML (``sim/hostgpus.py``). Donors stay simulated.

Ctrl-C (or SIGTERM) stops the hub (which stops every server and its proxy), then the
federation (which kills any pod process left), and checks that the public port is free again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.demo_lab import MEMBERS as LAB_MEMBERS
from jupyter_gpuburst.demo_lab import booked_lab
from jupyter_gpuburst.hub.labs.model import Booking
from jupyter_gpuburst.hub.ports import browser_blocks, free_port, port_is_free
from jupyter_gpuburst.sim.federation import CONTROL_PLANES
from jupyter_gpuburst.sim.hostgpus import GPUS_MODES, HostGPUError, HostGPUs, host_gpus

DEMO_CONFIG = Path(__file__).with_name("demo_config.py")
REPO = Path(__file__).resolve().parent.parent
PROXY_NAME = "configurable-http-proxy"
NAMESPACE = "default"
DEFAULT_PASSWORD = "gpuburst"
STUDENTS = ("student1", "student2")
ADMIN = "teacher"
# JupyterHub's SharedPasswordAuthenticator's own minimums (its help says so; it refuses shorter)
USER_PASSWORD_MIN = 8
ADMIN_PASSWORD_MIN = 32
# demo_config.py's kernel-mode profile
KERNEL_PROFILE = "CPU server + GPU kernels on demand"
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MIG_SLICES = 7


@dataclass(frozen=True)
class DemoOptions:
    port: int = 8000
    origin_gpus: int = 2
    donor_gpus: int = 8
    donors: int = 1
    password: str = DEFAULT_PASSWORD
    state_dir: Path | None = None
    pod_network: str = "shared"
    gpus: str = "auto"
    # the admin's own password: JupyterHub's SharedPasswordAuthenticator lets admins in only with
    # one of 32 characters or more; "" makes one up for this run (the banner prints it)
    admin_password: str = ""
    # "kube": each site on its own real control plane (make kube), the hub as its ServiceAccount
    control_plane: str = "emulator"
    # the admin's own jupyterhub_config.py, loaded after demo_config.py (its settings win)
    config: Path | None = None

    def __post_init__(self) -> None:
        if self.control_plane not in CONTROL_PLANES:
            raise ValueError(f"--control-plane must be one of {', '.join(CONTROL_PLANES)}, not {self.control_plane!r}")
        if self.gpus not in GPUS_MODES:
            raise ValueError(f"--gpus must be one of {', '.join(GPUS_MODES)}, not {self.gpus!r}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--port must be 1-65535, not {self.port}")
        if browser_blocks(self.port):
            raise ValueError(f"--port {self.port} is one browsers refuse to open (ERR_UNSAFE_PORT); choose another")
        if not 0 <= self.origin_gpus <= 64:
            raise ValueError(f"--origin-gpus must be 0-64, not {self.origin_gpus}")
        if not 1 <= self.donor_gpus <= 64:
            raise ValueError(f"--donor-gpus must be 1-64, not {self.donor_gpus}")
        if not 0 <= self.donors <= 8:
            raise ValueError(f"--donors must be 0-8, not {self.donors}")
        if self.pod_network not in ("shared", "namespaces"):
            raise ValueError(f"--pod-network must be 'shared' or 'namespaces', not {self.pod_network!r}")
        if not self.password:
            raise ValueError("--password must not be empty")
        if len(self.password) < USER_PASSWORD_MIN:
            raise ValueError(f"--password must be at least {USER_PASSWORD_MIN} characters")
        if self.admin_password and (len(self.admin_password) < ADMIN_PASSWORD_MIN or self.admin_password == self.password):
            raise ValueError(f"--admin-password must be at least {ADMIN_PASSWORD_MIN} characters, and not the users' password")

    def with_admin_password(self) -> DemoOptions:
        """These options, with an admin password made up where none was given."""
        return self if self.admin_password else replace(self, admin_password=secrets.token_urlsafe(24))

    @property
    def hub_ip(self) -> str:
        """Where the hub listens: in network namespaces of their own, pods reach the host at a
        loopback address other than their own 127.0.0.1."""
        return "127.0.0.2" if self.pod_network == "namespaces" else "127.0.0.1"


def federation_config(opts: DemoOptions) -> dict[str, Any]:
    """The federation as `gpuburst sim` YAML data: A100s on the origin, H100s on the donors."""
    origin_nodes: list[dict[str, Any]] = [{"name": "origin-cpu", "cpu": "8", "memory": "32Gi"}]
    if opts.origin_gpus:
        origin_nodes.insert(
            0,
            {
                "name": "origin-gpu",
                "cpu": "16",
                "memory": "64Gi",
                "resources": {"nvidia.com/gpu": opts.origin_gpus},
                "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960"},
            },
        )
    origin_nodes.append(
        {
            "name": "origin-mig",
            "cpu": "16",
            "memory": "64Gi",
            "resources": {MIG_RESOURCE: MIG_SLICES},
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia.com/mig.strategy": "mixed"},
        }
    )
    donors = []
    for i in range(1, opts.donors + 1):
        donors.append(
            {
                "name": f"donor-{i}",
                "nodes": [
                    {
                        "name": f"donor-{i}-gpu",
                        "cpu": "64",
                        "memory": "256Gi",
                        "resources": {"nvidia.com/gpu": opts.donor_gpus},
                        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"},
                    }
                ],
                "grant": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": opts.donor_gpus},
            }
        )
    return {"origin": {"name": "origin", "nodes": origin_nodes}, "donors": donors}


def gpu_products(config: dict[str, Any]) -> dict[str, dict[str, str]]:
    """site -> GPU resource -> the nodes' ``nvidia.com/gpu.product`` label, from the federation.

    The demo's user servers run the simulated GPU backend; the hub tells each one the product
    of the site and resource it was placed on, so the panel shows what the node's labels say.
    """
    sites = [(config["origin"]["name"], config["origin"]["nodes"])]
    sites += [(donor["name"], donor["nodes"]) for donor in config["donors"]]
    out: dict[str, dict[str, str]] = {}
    for site, nodes in sites:
        for node in nodes:
            product = (node.get("labels") or {}).get("nvidia.com/gpu.product")
            for resource in node.get("resources") or {}:
                if product:
                    out.setdefault(site, {})[resource] = product
    return out


def real_gpus(host: HostGPUs | None) -> dict[str, list[str]]:
    """site -> the GPU resources that are this machine's own devices there (the origin's, if any):
    servers and GPU kernels placed on them read NVML instead of simulating."""
    return {"origin": sorted(host.resources())} if host is not None else {}


def with_host(opts: DemoOptions, host: HostGPUs | None) -> DemoOptions:
    """The options as the banner tells them: the origin's whole GPUs are the host's, if any."""
    return opts if host is None else replace(opts, origin_gpus=host.resources().get("nvidia.com/gpu", 0))


def find_proxy() -> str | None:
    """JupyterHub's configurable-http-proxy: ``$GPUBURST_DEMO_PROXY``, a checkout's node_modules
    (`npm ci` in `make setup` installs it), or the one on PATH (`npm install -g`)."""
    explicit = os.environ.get("GPUBURST_DEMO_PROXY")
    if explicit:
        return explicit
    for base in (REPO, Path.cwd()):
        candidate = base / "node_modules" / ".bin" / PROXY_NAME
        if candidate.is_file():
            return str(candidate)
    return shutil.which(PROXY_NAME)


def proxy_command() -> list[str]:
    return [find_proxy() or PROXY_NAME]


def largest_node_gpus(opts: DemoOptions, donors: int) -> int:
    """The most whole GPUs one node has: the demo's largest GPU kernel takes them all, so that
    one user can fill the sites and meet the queue."""
    return max(opts.origin_gpus, opts.donor_gpus if donors else 0, 1)


def _where(free: dict[str, int], count: int) -> str | None:
    """Where local-first placement puts ``count`` GPUs given ``free`` per site (origin first)."""
    for site, left in free.items():
        if left >= count:
            free[site] = left - count
            return site
    return None


def gpuburst_command() -> str:
    """``gpuburst`` as another shell runs it: by name where it is on PATH, else by its path
    (``make demo`` runs it from the checkout's .venv, which a new shell has not activated)."""
    script = Path(sys.executable).with_name("gpuburst")
    if not script.exists():
        return "gpuburst"
    found = shutil.which("gpuburst")
    if found and Path(found).resolve() == script.resolve():
        return "gpuburst"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def try_steps(
    opts: DemoOptions, donor_names: list[str], url: str, kubeconfig: Path, real: bool = False, lab: Booking | None = None
) -> list[str]:
    """The banner's "Try" steps, worked out from the options so that each one comes true."""
    count = 2 if opts.origin_gpus >= 2 or (opts.origin_gpus == 0 and opts.donor_gpus >= 2) else 1
    profile = "2 GPUs" if count == 2 else "1 GPU"
    free = {"origin": opts.origin_gpus, **{name: opts.donor_gpus for name in donor_names}}
    steps = []
    for n, student in enumerate(("student1", "student2", "student3"), start=1):
        site = _where(free, count)
        prefix = f"{n}. " + ("Log in as student1" if n == 1 else f"In a private window, log in as {student}")
        if site is None:
            steps.append(f"{prefix} with '{profile}': no site has {count} free, so the form shows it as full now.")
            break
        where = "the origin" if site == "origin" else f"{site}, a donor"
        steps.append(f"{prefix}, pick '{profile}' and start: the server lands on {where}.")
        if n >= 2 and site != "origin":
            break  # the origin and a burst to a donor are both shown
    gpus = "its GPUs (this machine's own on the origin, simulated on donors)" if real else "its (simulated) GPUs"
    steps.append(f"{len(steps) + 1}. The spawn page says why; the GPU panel in JupyterLab shows where it runs and {gpus}.")
    steps.append(
        f"{len(steps) + 1}. Log in as student4 and pick '{KERNEL_PROFILE}': the server stays on the origin; the launcher's "
        "GPU kernels section says how many could start now and where, and a GPU kernel you start shows in the GPU panel "
        "with its site, node and GPU memory."
    )
    from jupyter_gpuburst.core.names import plural

    whole = largest_node_gpus(opts, len(donor_names))
    steps.append(
        f"{len(steps) + 1}. As student5 with '{KERNEL_PROFILE}', start 'Python 3 ({plural(whole, 'GPU')})' in the launcher, then "
        f"again until one waits in line: with no site's {plural(whole, 'GPU')} free, the status bar and the GPU panel say its "
        "place, with Cancel."
    )
    labs = ""
    if lab is not None:
        when = f"{lab.start.astimezone():%H:%M}-{lab.end.astimezone():%H:%M}"
        labs = f", and {url}/services/gpuburst/labs for the lab {lab.title}, booked {when} for {lab.group} ({', '.join(LAB_MEMBERS)})"
    steps.append(
        f"{len(steps) + 1}. Log in as {ADMIN} (with the admin's password above) and open {url}/services/gpuburst/capacity "
        f"for capacity per site{labs}."
    )
    command = gpuburst_command()
    steps.append(f"{len(steps) + 1}. In another shell: {command} doctor --kubeconfig {kubeconfig}")
    steps.append(f"{' ' * len(f'{len(steps)}. In another shell: ')}{command} capacity --kubeconfig {kubeconfig}")
    return steps


def banner(
    opts: DemoOptions,
    url: str,
    kubeconfig: Path,
    donor_names: list[str],
    host: HostGPUs | None = None,
    found: str | None = None,
    lab: Booking | None = None,
) -> str:
    from jupyter_gpuburst.core.names import plural

    opts = with_host(opts, host)
    donors = ", ".join(f"{name} ({plural(opts.donor_gpus, 'GPU')})" for name in donor_names) or "none"
    if host is None:
        origin = f"{plural(opts.origin_gpus, 'GPU')} + 1 GPU as {MIG_SLICES} MIG 1g.10gb slices"
    else:
        mig = any(r.startswith("nvidia.com/mig-") for r in host.resources())
        origin = f"this machine's {host.summary()}" + ("" if mig else f" + 1 simulated GPU as {MIG_SLICES} MIG 1g.10gb slices")
    return "\n".join(
        [
            "",
            f"  jupyter-gpuburst demo is ready: {url}",
            "",
            f"  origin: {origin};  donors: {donors}",
            *([f"  GPUs:   {found}"] if found else []),
            f"  users:  {', '.join(STUDENTS)} (any other name works too);  password: {opts.password}",
            f"  admin:  {ADMIN};  password: {opts.admin_password}",
            *(
                [f"  pods:   each in a network namespace of its own, as on a cluster; the hub listens on {opts.hub_ip}"]
                if opts.pod_network == "namespaces"
                else []
            ),
            "",
            "  Try:",
            *(f"    {step}" for step in try_steps(opts, donor_names, url, kubeconfig, real=host is not None, lab=lab)),
            "",
            "  Ctrl-C stops everything.",
            "",
        ]
    )


@contextlib.contextmanager
def _state_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="gpuburst-demo-") as tmp:
        yield Path(tmp)


class Demo:
    """Start and stop the federation and the hub, in that order and in reverse."""

    def __init__(self, opts: DemoOptions, state: Path, host: HostGPUs | None = None) -> None:
        self.opts = opts
        self.host = host
        self.state = state
        self.fed: Any = None
        self.hub: asyncio.subprocess.Process | None = None
        self.kubeconfig = state / "kubeconfig"
        self.hub_log = state / "jupyterhub.log"
        self.url = f"http://127.0.0.1:{opts.port}"
        self.lab: Booking | None = None

    async def start(self) -> None:
        from jupyter_gpuburst.sim.config import parse_config
        from jupyter_gpuburst.sim.federation import Federation
        from jupyter_gpuburst.sim.kubelet import netns

        os.environ[netns.MODE_ENV] = self.opts.pod_network  # read by each cluster's kubelet
        config = parse_config(federation_config(self.opts), "<gpuburst demo>")
        if self.host is not None:
            from jupyter_gpuburst.sim.hostgpus import with_host_gpus

            config = with_host_gpus(config, self.host)
        self.fed = Federation(config, self.state / "sim", control_plane=self.opts.control_plane)
        await self.fed.start()
        self.fed.write_kubeconfig(self.kubeconfig, namespace=NAMESPACE)
        # What an admin does once on a real cluster (`liqoctl offload namespace`): the user
        # namespace may reach every donor, and local nodes too.
        self.fed.origin.store.create(
            f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", liqo.namespace_offloading(NAMESPACE), NAMESPACE
        )
        self.lab = booked_lab(self.state, ADMIN)
        await self._start_hub(self._hub_kubeconfig())

    def _hub_kubeconfig(self) -> Path:
        """The emulator's open endpoints, or on the real control plane the hub's ServiceAccount."""
        if self.opts.control_plane != "kube":
            return self.kubeconfig
        from jupyter_gpuburst.sim.kube import deployment

        return deployment.hub_kubeconfig(self.fed.origin, self.state, users=NAMESPACE, donors=self.fed.donors)

    async def _start_hub(self, kubeconfig: Path, timeout: float = 60.0) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "GPUBURST_DEMO_PORT": str(self.opts.port),
            "GPUBURST_DEMO_HUB_IP": self.opts.hub_ip,
            "GPUBURST_DEMO_HUB_PORT": str(free_port(self.opts.hub_ip)),
            "GPUBURST_DEMO_PROXY_API_PORT": str(free_port()),
            "GPUBURST_DEMO_STATE_DIR": str(self.state),
            "GPUBURST_DEMO_PASSWORD": self.opts.password,
            "GPUBURST_DEMO_ADMIN_PASSWORD": self.opts.admin_password,
            "GPUBURST_DEMO_NAMESPACE": NAMESPACE,
            "GPUBURST_DEMO_GPU_PRODUCTS": json.dumps(gpu_products(federation_config(self.opts))),
            "GPUBURST_DEMO_REAL_GPUS": json.dumps(real_gpus(self.host)),
            "GPUBURST_DEMO_NODE_GPUS": str(largest_node_gpus(with_host(self.opts, self.host), self.opts.donors)),
            "GPUBURST_DEMO_USER_CONFIG": str(self.opts.config or ""),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if self.opts.pod_network == "namespaces":
            env["GPUBURST_SERVICE_HOST"] = self.opts.hub_ip  # users' servers call the kernel API there
        # The demo talks to the federation, never to a cluster this machine may be inside of.
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = self.hub_log.open("ab")
        try:
            self.hub = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "jupyterhub",
                "-f",
                str(DEMO_CONFIG),
                cwd=self.state,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            log.close()
        await self._wait_for_login_page(timeout)

    async def _wait_for_login_page(self, timeout: float) -> None:
        import aiohttp

        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                assert self.hub is not None
                if self.hub.returncode is not None:
                    raise RuntimeError(f"JupyterHub exited with {self.hub.returncode}; its log:\n{self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(f"{self.url}/hub/login") as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterHub did not serve its login page within {timeout:.0f}s; its log:\n{self.log_tail()}")
                await asyncio.sleep(0.1)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.hub_log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    async def stop(self, timeout: float = 30.0) -> None:
        hub, self.hub = self.hub, None
        # the hub's own processes, its proxy among them: JupyterHub starts the proxy in a
        # session of its own, which the hub's process group does not reach
        children: list[psutil.Process] = []
        if hub is not None and hub.returncode is None:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(hub.pid).children(recursive=True)
            # SIGTERM: the hub stops every server (cleanup_servers) and then its proxy.
            with contextlib.suppress(ProcessLookupError):
                hub.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(hub.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        if hub is not None:
            # Anything the hub left (a proxy it could not stop, killed before it got to it) goes now.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(hub.pid, signal.SIGKILL)
            for child in children:
                with contextlib.suppress(psutil.Error):
                    child.kill()  # psutil checks it is still the process it listed, not a reused pid
            with contextlib.suppress(ProcessLookupError):
                await hub.wait()
            # until they are gone: the hub SIGTERMs its proxy without waiting, and the proxy, still
            # exiting when the hub was, held the public port as `run` checked it (under load)
            await asyncio.to_thread(psutil.wait_procs, children, timeout)
        if self.fed is not None:
            fed, self.fed = self.fed, None
            await fed.stop()  # kills the pod processes that are still running


async def run(opts: DemoOptions, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> int:
    """Run the demo until ``stop`` is set (or SIGINT/SIGTERM); returns an exit code."""
    if not DEMO_CONFIG.is_file():
        print(f"gpuburst demo: {DEMO_CONFIG} is missing; run the demo from a source checkout (make demo)", file=sys.stderr)
        return 2
    if not port_is_free(opts.port):
        print(f"gpuburst demo: port {opts.port} is in use; choose another with --port", file=sys.stderr)
        return 2
    if find_proxy() is None:
        print(
            "gpuburst demo: JupyterHub's configurable-http-proxy is missing; in a checkout run `make setup`,"
            " otherwise `npm install -g configurable-http-proxy`",
            file=sys.stderr,
        )
        return 2
    try:
        host, found = host_gpus(opts.gpus)  # before anything starts: `--gpus real` on a machine without one stops here
    except HostGPUError as exc:
        print(f"gpuburst demo: {exc}; use --gpus auto or --gpus simulated", file=sys.stderr)
        return 2
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = time.monotonic()
    try:
        with _state_dir(opts.state_dir) as state:
            demo = Demo(opts, state, host)
            try:
                print("starting the federation and JupyterHub ...", flush=True)
                if await _unless_stopped(demo.start(), stop):
                    print(banner(opts, demo.url, demo.kubeconfig, list(demo.fed.donors), host, found, demo.lab), flush=True)
                    kept = "" if opts.state_dir else ", removed on exit (keep it with --state-dir)"
                    print(f"  (login page up in {time.monotonic() - started:.1f}s; hub log: {demo.hub_log}{kept})", flush=True)
                    if ready is not None:
                        ready.set()
                    await stop.wait()
                print("stopping ...", flush=True)
            except RuntimeError as exc:
                print(f"gpuburst demo: {exc}", file=sys.stderr)
                return 1
            finally:
                await demo.stop()
        if not port_is_free(opts.port):
            print(f"gpuburst demo: port {opts.port} is still bound after stopping", file=sys.stderr)
            return 1
        print("stopped; nothing left running.", flush=True)
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _unless_stopped(starting: Any, stop: asyncio.Event) -> bool:
    """Await ``starting`` unless ``stop`` comes first (a SIGTERM or Ctrl-C while the federation
    and the hub start, which take a while on a loaded machine): then it is cancelled, and what
    it had started is for the caller to stop. True when it finished."""
    start = asyncio.ensure_future(starting)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not start.done():
            start.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await start  # its error, if it failed, goes to the caller
    return not start.cancelled()
