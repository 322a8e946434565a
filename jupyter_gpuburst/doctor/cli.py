"""`gpuburst doctor` and `gpuburst capacity` on the command line.

Exit codes: 0 when nothing needed is missing (warnings allowed), 1 when something is, 2 when the
cluster cannot be reached or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import json
import sys

from kubernetes.client.exceptions import ApiException

from jupyter_gpuburst.doctor.checks import KERNELS_RBAC_MANIFEST, diagnose, new_inventory, take_capacity
from jupyter_gpuburst.doctor.connect import Connection, connect
from jupyter_gpuburst.doctor.reflection import hub_namespace_of
from jupyter_gpuburst.doctor.render import capacity_rows, render_capacity, render_report
from jupyter_gpuburst.doctor.view import ClusterUnreachable, NotPermitted


def _common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--resource",
        action="append",
        dest="resources",
        metavar="NAME",
        help="GPU resource name to count (repeatable; default: nvidia.com/gpu, amd.com/gpu and nvidia.com/mig-*)",
    )


def _connect(args: argparse.Namespace, namespace: str | None = None) -> Connection:
    return connect(args.kubeconfig, args.context, namespace, getattr(args, "impersonate", None), getattr(args, "impersonate_group", None))


def main(argv: list[str]) -> int:
    """`gpuburst doctor`."""
    parser = argparse.ArgumentParser(
        prog="gpuburst doctor",
        description="Check a cluster for everything GPUBurstSpawner needs: Liqo donors and their GPUs, local GPU "
        "nodes, the hub's permissions and the user namespace's offloading. Exit 1 when something needed is missing.",
    )
    _common_args(parser)
    parser.add_argument("-n", "--namespace", help="the namespace user servers run in (default: the context's)")
    parser.add_argument(
        "--as", dest="impersonate", metavar="USER", help="check permissions as this identity, e.g. system:serviceaccount:jhub:hub"
    )
    parser.add_argument("--as-group", dest="impersonate_group", metavar="GROUP", help="a group to impersonate along with --as")
    parser.add_argument(
        "--hub-namespace",
        metavar="NAMESPACE",
        help="the namespace the hub runs in, which must not be offloaded (default: that of --as system:serviceaccount:NS:NAME)",
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help=f"GPU kernels are in use: their permissions ({KERNELS_RBAC_MANIFEST}) are needed, not a warning",
    )
    args = parser.parse_args(argv)
    try:
        conn = _connect(args, args.namespace)
        hub_namespace = args.hub_namespace or hub_namespace_of(args.impersonate)
        report = diagnose(conn.cluster, conn.context, conn.namespace, args.resources, kernels=args.kernels, hub_namespace=hub_namespace)
    except (ClusterUnreachable, NotPermitted) as exc:
        print(f"gpuburst doctor: {exc}", file=sys.stderr)
        return 2
    except ApiException as exc:
        print(f"gpuburst doctor: the API server answered {exc.status} {exc.reason}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else render_report(report))
    return 0 if report.ok else 1


def capacity_main(argv: list[str]) -> int:
    """`gpuburst capacity`: free/total GPUs per site."""
    parser = argparse.ArgumentParser(prog="gpuburst capacity", description="Print free/total GPUs per site (origin and each Liqo donor).")
    _common_args(parser)
    args = parser.parse_args(argv)
    try:
        conn = _connect(args)
        snapshot = take_capacity(conn.cluster, new_inventory(args.resources))
    except (ClusterUnreachable, NotPermitted) as exc:
        print(f"gpuburst capacity: {exc}", file=sys.stderr)
        return 2
    except ApiException as exc:
        print(f"gpuburst capacity: the API server answered {exc.status} {exc.reason}", file=sys.stderr)
        return 2
    print(json.dumps({"context": conn.context, "sites": capacity_rows(snapshot)}, indent=2) if args.json else render_capacity(snapshot))
    return 0
