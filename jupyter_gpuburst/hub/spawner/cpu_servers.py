"""Servers without a GPU: they stay on the origin's own nodes and say so.

Donors lend GPUs; a CPU-only server has no reason to leave the origin (its files are there),
so its pod gets the same "not a Liqo virtual node" term as a GPU pod placed on the origin, and
the server's environment names the origin and its node like any placed server's does.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.core import keys, liqo

REASON = "No GPU requested: the server runs on the origin, on a CPU node."


def node_selector_term() -> dict[str, Any]:
    return liqo.local_node_affinity_term()


def env() -> dict[str, Any]:
    """What the server extension reads (see server/placement.py): site, reason, node."""
    return {
        keys.SITE_ENV: keys.ORIGIN_SITE,
        keys.CLUSTER_ENV: "",
        keys.REASON_ENV: REASON,
        keys.NODE_ENV: {"valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    }
