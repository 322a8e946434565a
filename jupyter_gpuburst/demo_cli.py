"""`gpuburst demo`'s command line: its flags, and the checks that refuse bad ones before
anything starts (the demo itself is ``jupyter_gpuburst.demo``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from jupyter_gpuburst.demo import ADMIN, DEFAULT_PASSWORD, DemoOptions, run
from jupyter_gpuburst.sim.federation import CONTROL_PLANES
from jupyter_gpuburst.sim.hostgpus import GPUS_MODE_ENV, GPUS_MODES


def config_problem(path: Path) -> str | None:
    """Why the admin's ``--config`` file cannot be loaded, in one line; None when it can.

    Read and compiled here, before the federation starts: a missing file or a syntax error
    would otherwise surface as a hub that exits, with its log, after a minute of starting."""
    try:
        source = path.read_bytes()
    except FileNotFoundError:
        return f"--config {path}: no such file"
    except IsADirectoryError:
        return f"--config {path}: a directory, not a JupyterHub config file"
    except OSError as exc:
        return f"--config {path}: cannot be read ({exc.strerror or exc.__class__.__name__})"
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        return f"--config {path}: not valid Python, line {exc.lineno}: {exc.msg}"
    except ValueError as exc:  # a NUL byte: not a text file at all
        return f"--config {path}: not valid Python ({exc})"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuburst demo",
        description="Run a local origin cluster and Liqo-peered donors, JupyterHub with GPUBurstSpawner and its "
        "proxy, all on 127.0.0.1. Prints the URL and the demo users; Ctrl-C stops everything.",
    )
    parser.add_argument("--port", type=int, default=DemoOptions.port, help="public port of the hub (default: %(default)s)")
    parser.add_argument(
        "--origin-gpus",
        type=int,
        default=DemoOptions.origin_gpus,
        help="whole GPUs on the origin's GPU node (default: %(default)s; the origin also has one GPU split into 7 MIG slices)",
    )
    parser.add_argument("--donor-gpus", type=int, default=DemoOptions.donor_gpus, help="GPUs each donor grants (default: %(default)s)")
    parser.add_argument("--donors", type=int, default=DemoOptions.donors, help="number of donor clusters (default: %(default)s)")
    parser.add_argument(
        "--password",
        default=os.environ.get("GPUBURST_DEMO_PASSWORD", DEFAULT_PASSWORD),
        help="shared password of the demo users, 8 characters or more (default: $GPUBURST_DEMO_PASSWORD, else %(default)s)",
    )
    parser.add_argument(
        "--admin-password",
        default=os.environ.get("GPUBURST_DEMO_ADMIN_PASSWORD", ""),
        help=f"password of the admin {ADMIN}, 32 characters or more (default: $GPUBURST_DEMO_ADMIN_PASSWORD, else one made up "
        "for this run, printed with the URL)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="keep the hub database, logs and pod directories here (default: a temp dir, removed on exit)",
    )
    parser.add_argument(
        "--pod-network",
        choices=("shared", "namespaces"),
        default=os.environ.get("GPUBURST_SIM_NETWORK") or "shared",
        help="'namespaces': each pod a network namespace of its own, as on a cluster (root only; the hub then listens on 127.0.0.2); "
        "'shared': the host's (default: $GPUBURST_SIM_NETWORK, else %(default)s)",
    )
    parser.add_argument(
        "--gpus",
        choices=GPUS_MODES,
        default=os.environ.get(GPUS_MODE_ENV) or "auto",
        help="'auto': this machine's NVIDIA GPUs on the origin when NVML finds any, else simulated ones; 'real': this machine's "
        "or an error; 'simulated': simulated GPUs everywhere (donors are always simulated; default: $GPUBURST_GPUS, else auto; with GPUs "
        "found, --origin-gpus is ignored)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="your own jupyterhub_config.py, loaded after the demo's own as `jupyterhub -f` would load it: try culling, "
        "budgets, warm pools or queues with your settings before deploying them",
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default=DemoOptions.control_plane,
        help="'emulator': the Python API emulator per site (no Go needed); 'kube': each site, the origin and every donor, on "
        "its own real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; `make kube` builds it, "
        "with Go >= 1.25), the hub acting as its ServiceAccount under the shipped RBAC (default: %(default)s)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        opts = DemoOptions(
            args.port,
            args.origin_gpus,
            args.donor_gpus,
            args.donors,
            args.password,
            args.state_dir,
            args.pod_network,
            args.gpus,
            args.admin_password,
            args.control_plane,
            args.config.resolve() if args.config else None,
        ).with_admin_password()
    except ValueError as exc:
        print(f"gpuburst demo: {exc}", file=sys.stderr)
        return 2
    if opts.config is not None and (why := config_problem(opts.config)):
        print(f"gpuburst demo: {why}", file=sys.stderr)
        return 2
    if opts.control_plane == "kube":
        from jupyter_gpuburst.sim.kube import deployment

        if why := deployment.unavailable():
            print(f"gpuburst demo: {why}", file=sys.stderr)
            return 2
    if opts.pod_network == "namespaces":
        from jupyter_gpuburst.sim.kubelet import netns

        why = netns.unavailable()
        if why:
            print(f"gpuburst demo: no pod network namespaces: {why}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(run(opts))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
