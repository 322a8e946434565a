"""`gpuburst doctor` and `gpuburst capacity`: check a cluster for what the spawner needs.

``view`` is what doctor reads from a cluster, ``connect`` reads it with the official
``kubernetes`` client (kubeconfig or in-cluster), ``checks`` turns it into findings with fixes,
``render`` prints them, ``cli`` is the command line. The checks only see plain dicts through
``ClusterView``, so they are tested with fakes and against the emulated federation alike.
"""

from jupyter_gpuburst.doctor.checks import (
    KERNEL_PERMISSIONS,
    KERNELS_RBAC_MANIFEST,
    RBAC_MANIFEST,
    REQUIRED_PERMISSIONS,
    Finding,
    Permission,
    Report,
    Status,
    check_build,
    check_liqo_installed,
    check_nodes,
    check_offloading,
    check_permissions,
    check_storage,
    check_versions,
    diagnose,
    new_inventory,
    rbac_fix,
    selects,
    take_capacity,
)
from jupyter_gpuburst.doctor.cli import capacity_main, main
from jupyter_gpuburst.doctor.connect import Connection, KubernetesCluster, connect
from jupyter_gpuburst.doctor.render import capacity_rows, render_capacity, render_report
from jupyter_gpuburst.doctor.view import ClusterUnreachable, ClusterView, NotPermitted

__all__ = [
    "KERNELS_RBAC_MANIFEST",
    "KERNEL_PERMISSIONS",
    "RBAC_MANIFEST",
    "REQUIRED_PERMISSIONS",
    "ClusterUnreachable",
    "ClusterView",
    "Connection",
    "Finding",
    "KubernetesCluster",
    "NotPermitted",
    "Permission",
    "Report",
    "Status",
    "capacity_main",
    "capacity_rows",
    "check_liqo_installed",
    "check_nodes",
    "check_offloading",
    "check_permissions",
    "check_storage",
    "check_build",
    "check_versions",
    "connect",
    "diagnose",
    "main",
    "new_inventory",
    "rbac_fix",
    "render_capacity",
    "render_report",
    "selects",
    "take_capacity",
]
