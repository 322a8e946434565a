"""How many GPU kernels of a profile could start now, per site, for the launcher.

A figure the launcher may show ("2 free on origin, 5 on donors"), not a promise: it is read from
the spawner's ledger (reservations included) with the placement policy applied as for a real
start (strategy, donor allowlist, caps), so a site the user may not use counts 0. Nothing is
reserved here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from jupyter_gpuburst.core.keys import ORIGIN_SITE
from jupyter_gpuburst.core.placement import GPURequest, Placement, PlacementInputError, Policy, decide


def availability(snapshot: Any, policy: Policy, request: GPURequest) -> dict[str, Any]:
    """``{"origin": n, "donors": m, "sites": {site: n}}``: kernels of ``request`` that fit now."""
    sites: dict[str, int] = {}
    for name in sorted(snapshot.sites):
        if request.allowed_sites is not None and name not in request.allowed_sites:
            continue
        try:
            usable = isinstance(decide(replace(request, allowed_sites=(name,)), snapshot, policy), Placement)
        except PlacementInputError:
            usable = False
        sites[name] = _fits_on_site(snapshot, name, request) if usable else 0
    return {
        "origin": sites.get(ORIGIN_SITE, 0),
        "donors": sum(n for s, n in sites.items() if s != ORIGIN_SITE),
        "sites": sites,
    }


def _fits_on_site(snapshot: Any, site: str, request: GPURequest) -> int:
    """Kernels of ``request.count`` units that fit on the site's eligible nodes, node by node."""
    return sum(node.free(request.resource) // request.count for node in snapshot.nodes.values() if node.site == site)
