"""Liqo's exposition reflection in the emulator: Services and EndpointSlices of offloaded
namespaces reach the donor under the same names, as Liqo's reflectors forge them."""

from __future__ import annotations

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.reflection import ENDPOINTSLICES, ConfigurationReflector
from jupyter_gpuburst.sim.store import Store


def reflector() -> tuple[Store, Store, ConfigurationReflector]:
    origin, donor = Store(), Store()
    origin.create("nodes", {"metadata": {"name": "donor-1", "labels": {liqo.TYPE_LABEL: liqo.VIRTUAL_NODE_TYPE}}}, None)
    origin.create("nodes", {"metadata": {"name": "gpu-a"}}, None)
    donor.create("namespaces", {"metadata": {"name": "users-origin"}}, None)  # the peering makes it
    return origin, donor, ConfigurationReflector(origin, donor, "origin", "donor-1", lambda ns: f"{ns}-origin" if ns == "users" else None)


def service(name: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "users"},
        "spec": {"ports": [{"port": 8081}], **spec},
    }


def test_a_service_keeps_its_name_and_ports_not_its_cluster_ip():
    _, donor, r = reflector()
    r.reflect("services", service("hub", clusterIP="10.96.0.9", clusterIPs=["10.96.0.9"]))
    r.reflect("services", service("headless", clusterIP="None", selector={"app": "x"}))
    assert [p["port"] for p in donor.get("services", "users-origin", "hub")["spec"]["ports"]] == [8081]
    # the donor's API server gives the copy a ClusterIP of its own
    assert "clusterIP" not in r.twin("services", service("hub", clusterIP="10.96.0.9"), "users-origin")["spec"]
    assert donor.get("services", "users-origin", "headless")["spec"]["clusterIP"] == "None"
    # a namespace that is not offloaded (the hub's) is never reflected
    r.reflect("services", {**service("hub"), "metadata": {"name": "hub", "namespace": "jhub"}})
    assert [s["metadata"]["namespace"] for s in donor.list("services", None)[0]] == ["users-origin", "users-origin"]


def test_an_endpoint_slice_drops_endpoints_the_donor_runs_and_follows_changes():
    _, donor, r = reflector()
    eps = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "hub", "namespace": "users", "labels": {"kubernetes.io/service-name": "hub"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.5"], "nodeName": "gpu-a"}, {"addresses": ["10.0.0.6"], "nodeName": "donor-1"}],
        "ports": [{"port": 8081}],
    }
    r.reflect(ENDPOINTSLICES, eps)
    copy = donor.get(ENDPOINTSLICES, "users-origin", "hub")
    assert copy["endpoints"] == [{"addresses": ["10.0.0.5"], "nodeName": "origin"}]
    assert copy["metadata"]["labels"]["kubernetes.io/service-name"] == "hub"
    assert copy["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == liqo.ENDPOINTSLICE_MANAGED_BY
    eps["endpoints"] = [{"addresses": ["10.0.0.7"]}]
    r.reflect(ENDPOINTSLICES, eps)
    assert donor.get(ENDPOINTSLICES, "users-origin", "hub")["endpoints"] == [{"addresses": ["10.0.0.7"], "nodeName": "origin"}]
    r.unreflect(ENDPOINTSLICES, "users", "hub")
    assert not donor.list(ENDPOINTSLICES, "users-origin")[0]


def test_a_donor_service_of_the_same_name_is_left_alone():
    _, donor, r = reflector()
    donor.create("services", {"metadata": {"name": "hub"}, "spec": {"ports": [{"port": 9999}]}}, "users-origin")
    r.reflect("services", service("hub"))
    assert [p["port"] for p in donor.get("services", "users-origin", "hub")["spec"]["ports"]] == [9999]
