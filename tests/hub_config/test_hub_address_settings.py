"""c.HubAddress: the hub's address in the user namespace (hub/address), its settings and manifests."""

from __future__ import annotations

import kubernetes_validate
import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.hub.address import HubAddress, endpoint_slice, service
from jupyter_gpuburst.hub.address.keeper import start_with_hub

K8S_VERSION = "1.31"


def test_the_pod_ip_comes_from_the_downward_api_env(monkeypatch):
    monkeypatch.setenv("GPUBURST_HUB_POD_IP", "10.42.0.7")
    assert HubAddress().pod_ip == "10.42.0.7"
    monkeypatch.delenv("GPUBURST_HUB_POD_IP")
    assert HubAddress().pod_ip == ""
    assert HubAddress().ports == {"hub": 8081, "gpuburst": 8082}


@pytest.mark.parametrize(
    ("trait", "value", "message"),
    [
        ("pod_ip", "hub.jhub", "is not an IP address"),
        ("ports", {"hub": 0}, "hub=0 is not a port"),
        ("ports", {}, "at least the hub's port"),
        ("interval", 0.0, "more than 0"),
    ],
)
def test_bad_settings_say_what_is_wrong(trait, value, message):
    with pytest.raises(TraitError, match=message):
        HubAddress(**{trait: value})


def test_a_hub_that_does_not_know_its_pod_ip_keeps_no_address(monkeypatch, caplog):
    monkeypatch.delenv("GPUBURST_HUB_POD_IP", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert start_with_hub(Config()) is None
    assert not caplog.records  # outside a cluster there is nothing to say
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert start_with_hub(Config()) is None
    assert "no GPUBURST_HUB_POD_IP" in caplog.text  # in a pod, servers would resolve "hub" to nothing
    c = Config()
    c.HubAddress.pod_ip = "not-an-ip"
    assert start_with_hub(c) is None  # logged with the reason; the hub itself goes on


def test_the_manifests_validate_and_lead_to_the_pod():
    ports = {"hub": 8081, "gpuburst": 8082}
    svc = service("hub", "jhub-users", ports)
    eps = endpoint_slice("hub", "jhub-users", "10.42.0.7", ports)
    for doc in (svc, eps):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    # no selector: the control plane would otherwise manage the endpoints, and find no hub pod here
    assert "selector" not in svc["spec"]
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8082, 8082), (8081, 8081)]
    assert eps["metadata"]["labels"]["kubernetes.io/service-name"] == "hub"
    assert eps["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "gpuburst.jupyter.org"
    assert eps["endpoints"] == [{"addresses": ["10.42.0.7"], "conditions": {"ready": True}}]
    assert endpoint_slice("hub", "jhub-users", "fd00::7", ports)["addressType"] == "IPv6"
