"""Service names for pods: ``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc[.cluster.local]``.

A cluster's DNS answers a Service's name with its ClusterIP, which kube-proxy forwards to a
ready endpoint. Here there is neither DNS nor kube-proxy, and ClusterIPs lead nowhere, so the
names go into each pod's managed hosts file (bound over /etc/hosts in its mount namespace) with
the address of a pod the Service selects, as a headless Service's name resolves. A Service's
``port`` must then equal its ``targetPort`` (KubeSpawner's and JupyterHub's do). Short names
resolve in the pod's own namespace only, as the resolver's search path makes them. A Service
without a selector resolves to a ready address of its EndpointSlices (label
``kubernetes.io/service-name``), whoever keeps them: names are per cluster, from that cluster's
store alone, so a donor's pods resolve only what the donor has (its own Services and what Liqo
reflected into it), never the origin's.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.sim.store import Store

Obj = dict[str, Any]
DOMAIN = "cluster.local"


def _serving(pod: Obj) -> bool:
    st = pod.get("status") or {}
    return bool(st.get("podIP")) and st.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or [])


SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINTSLICES = "endpointslices.discovery.k8s.io"


def _sliced(store: Store) -> dict[tuple[str, str], str]:
    """(namespace, service name) -> the first ready address of the Service's EndpointSlices (by
    slice name; an endpoint without conditions counts as ready, as the API defines)."""
    out: dict[tuple[str, str], str] = {}
    for eps in sorted(store.iter_objects(ENDPOINTSLICES), key=lambda e: e["metadata"]["name"]):
        svc = (eps["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
        key = (eps["metadata"]["namespace"], svc)
        if not svc or key in out:
            continue
        for endpoint in eps.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready", True) is not False and endpoint.get("addresses"):
                out[key] = endpoint["addresses"][0]
                break
    return out


def addresses(store: Store) -> list[tuple[str, str, str]]:
    """(namespace, service name, address) of every Service with a selector and a running pod it
    selects (a ready one first), and of every Service without one that has a ready endpoint."""
    out = []
    # read-only and without copies: this runs again whenever a pod changes while Services exist
    pods = list(store.iter_objects("pods"))
    sliced = _sliced(store)
    for svc in sorted(store.iter_objects("services"), key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        selector = (svc.get("spec") or {}).get("selector") or {}
        ns = svc["metadata"]["namespace"]
        if not selector:
            if (address := sliced.get((ns, svc["metadata"]["name"]))) is not None:
                out.append((ns, svc["metadata"]["name"], address))
            continue
        selected = (
            p
            for p in pods
            if p["metadata"].get("namespace") == ns and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        )
        serving = sorted((p for p in selected if _serving(p)), key=lambda p: (not _ready(p), p["metadata"]["name"]))
        if serving:
            out.append((ns, svc["metadata"]["name"], serving[0]["status"]["podIP"]))
    return out


def hosts_lines(table: list[tuple[str, str, str]], namespace: str) -> list[str]:
    """Hosts-file lines of ``table`` for a pod in ``namespace``."""
    lines = []
    for ns, name, ip in table:
        names = [f"{name}.{ns}.svc.{DOMAIN}", f"{name}.{ns}.svc", f"{name}.{ns}"]
        if ns == namespace:
            names.append(name)
        lines.append(f"{ip}\t{' '.join(names)}")
    return lines
