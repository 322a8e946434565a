"""`gpuburst sim`: run the local federation in the foreground until Ctrl-C (or SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from pathlib import Path

from jupyter_gpuburst.sim.config import DEFAULT_CONFIG, ConfigError, FederationConfig, load_config
from jupyter_gpuburst.sim.federation import CONTROL_PLANES, Federation
from jupyter_gpuburst.sim.hostgpus import GPUS_MODE_ENV, GPUS_MODES, HostGPUError, host_gpus, with_host_gpus
from jupyter_gpuburst.sim.kubelet import netns
from jupyter_gpuburst.sim.lifeline import on_parent_exit

# a namespace's name, as kube-apiserver validates it (RFC 1123 label)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _namespace(value: str) -> str:
    if not _NAMESPACE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a namespace's name (lowercase letters, digits and '-', at most 63)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuburst sim", description="Run an origin cluster and its Liqo-peered donors locally (Kubernetes API emulators on 127.0.0.1)."
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="federation YAML (default: the shipped default.yaml)")
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="'emulator': each site's API server is the Python emulator (no Go needed); 'kube': each site, the origin and "
        "every donor, runs its own real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), "
        "built once with `make kube` (needs Go >= 1.25) (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=Path("gpuburst-sim.kubeconfig"),
        help="where to write the kubeconfig with a context per cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--install-hub",
        metavar="NAMESPACE",
        type=_namespace,
        default=None,
        help="with --control-plane kube: install on the origin as docs/install.md asks an admin to (the hub's RBAC, "
        "the users' namespace NAMESPACE, each donor's kernel namespace), and write a kubeconfig acting as the hub's "
        "ServiceAccount, hub.kubeconfig, beside --kubeconfig-out",
    )
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="pod working directories and logs (default: a temp dir, removed on exit)"
    )
    parser.add_argument(
        "--pod-network",
        choices=("shared", "namespaces"),
        default=None,
        help=f"'namespaces': each pod a network namespace of its own, as on a cluster (root only; pods then reach the host at loopback addresses other than 127.0.0.1); 'shared': the host's (default: ${netns.MODE_ENV}, else shared)",
    )
    parser.add_argument(
        "--gpus",
        choices=GPUS_MODES,
        default=os.environ.get(GPUS_MODE_ENV) or "auto",
        help="'auto': this machine's NVIDIA GPUs replace the origin's GPU node's when NVML finds any; 'real': the same, or an "
        "error; 'simulated': the config's GPUs as they are (donors are always as configured; default: $GPUBURST_GPUS, else auto)",
    )
    parser.add_argument(
        "--stop-with-parent",
        action="store_true",
        help="stop as on SIGTERM once the process that started this one is gone (for programs that start the federation "
        "in a session of its own: it then outlives none of them, however they end)",
    )
    parser.add_argument("--check", action="store_true", help="only check the config and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    return parser


async def serve(
    config: FederationConfig,
    kubeconfig_out: Path,
    state_dir: Path | None,
    parent: int | None = None,
    control_plane: str = "emulator",
    install_hub: str | None = None,
) -> None:
    """Run the federation until SIGINT, SIGTERM or, with ``parent``, that process's end;
    ``install_hub``: the users' namespace of a hub installed as docs/install.md says."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if parent is not None:
        on_parent_exit(lambda: loop.call_soon_threadsafe(stop.set), parent)
    fed = Federation(config, state_dir, control_plane=control_plane)
    # a real control plane per site takes a while to start: a stop asked meanwhile ends the start
    # (Federation.start stops what it had started) rather than waiting for it
    starting = asyncio.ensure_future(fed.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        print("stopped while starting", flush=True)
        return
    starting.result()  # a start that failed has stopped what it started: its error is the caller's
    try:
        path = fed.write_kubeconfig(kubeconfig_out)
        for name, url in fed.contexts().items():
            print(f"{name}: {url}", flush=True)
        print(f"kubeconfig: {path} (contexts: {', '.join(fed.contexts())}; current: {fed.origin.name})", flush=True)
        if install_hub is not None:
            from jupyter_gpuburst.sim.kube import deployment

            hub = deployment.hub_kubeconfig(fed.origin, Path(kubeconfig_out).parent, users=install_hub, donors=fed.donors)
            print(f"hub kubeconfig: {hub} (the hub's ServiceAccount, users in namespace {install_hub})", flush=True)
        print("ready; Ctrl-C to stop", flush=True)
        await stop.wait()
        print("stopping", flush=True)
    finally:
        await fed.stop()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"gpuburst sim: bad config: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{config.source}: ok ({1 + len(config.donors)} clusters)")
        return 0
    if args.install_hub is not None and args.control_plane != "kube":
        print("gpuburst sim: --install-hub needs --control-plane kube (the emulator's clients are all admins)", file=sys.stderr)
        return 2
    if args.control_plane == "kube":
        from jupyter_gpuburst.sim.kube import binaries, deployment  # the emulator needs none of it

        if why := (deployment.unavailable() if args.install_hub is not None else binaries.missing()):
            print(f"gpuburst sim: {why}", file=sys.stderr)
            return 2
    # read first: a parent that is gone by the time the federation is up still counts
    parent = os.getppid() if args.stop_with_parent else None
    try:
        host, found = host_gpus(args.gpus)
    except HostGPUError as exc:
        print(f"gpuburst sim: {exc}; use --gpus auto or --gpus simulated", file=sys.stderr)
        return 2
    except ValueError as exc:  # a bad $GPUBURST_GPUS: argparse checks only what is typed
        print(f"gpuburst sim: {exc}", file=sys.stderr)
        return 2
    if host is not None:
        config = with_host_gpus(config, host)
    print(f"GPUs: {found}", flush=True)
    if args.pod_network:
        os.environ[netns.MODE_ENV] = args.pod_network  # read by each cluster's kubelet
    try:
        why = netns.unavailable() if netns.requested() else None
    except ValueError as exc:
        why = str(exc)
    if why:
        print(f"gpuburst sim: no pod network namespaces: {why}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config, args.kubeconfig_out, args.state_dir, parent, args.control_plane, args.install_hub))
    except (OSError, RuntimeError) as exc:  # a port taken, a control plane that did not come up (its log's tail follows)
        print(f"gpuburst sim: {exc}", file=sys.stderr)
        return 1
    return 0
