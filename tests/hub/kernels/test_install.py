"""``install(c)`` turns kernel mode on as part of the gpuburst service: the scope, the servers'
token scopes (merged with the admin's), the kernel API's URL for servers; no extra_handlers."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub import install, service
from jupyter_gpuburst.hub.kernels import KERNELS_URL_ENV, SCOPE
from jupyter_gpuburst.hub.service import server_env

OURS = ["access:services!service=gpuburst", "custom:gpuburst:kernels!user"]


@pytest.fixture(autouse=True)
def no_registered_service(monkeypatch):
    monkeypatch.setattr(service, "_registered", None)


def config(**spawner: object) -> Config:
    c = Config()
    c.JupyterHub.hub_connect_url = "http://hub.jhub.svc.cluster.local:8081"
    for section, value in spawner.items():
        c[section].server_token_scopes = value
    return c


def test_kernel_mode_is_part_of_the_service_not_extra_handlers():
    c = config()
    install(c)
    assert "extra_handlers" not in c.JupyterHub
    assert SCOPE in c.JupyterHub.custom_scopes and c.JupyterHub.custom_scopes[SCOPE]["description"]
    [entry] = [s for s in c.JupyterHub.services if s["name"] == "gpuburst"]
    # servers call the service at its own address: the hub Service's port 8082, as the hub API's host
    assert server_env() == {
        KERNELS_URL_ENV: f"{entry['url']}/services/gpuburst/api/kernels",
        # and where the server reports its GPU activity for the culler (docs/culling.md)
        keys.ACTIVITY_URL_ENV: f"{entry['url']}/services/gpuburst/api/activity",
    }
    assert entry["url"] == "http://hub.jhub.svc.cluster.local:8082"


def test_without_install_servers_get_no_kernel_url():
    assert server_env() == {}


def test_server_tokens_default_to_the_server_role_plus_the_kernel_scopes():
    c = config()
    install(c)
    scopes = c.Spawner.server_token_scopes
    assert {"users:activity!user", "access:servers!server"} <= set(scopes)
    assert set(OURS) <= set(scopes)


def test_the_admins_server_token_scopes_are_kept_and_extended():
    c = config(KubeSpawner=["users:activity!user", "read:users:name"])
    install(c)
    install(c)  # twice changes nothing
    assert c.KubeSpawner.server_token_scopes == ["users:activity!user", "read:users:name", *OURS]
    assert "server_token_scopes" not in c.Spawner  # the admin's section wins; ours would be ignored


async def test_a_callable_server_token_scopes_is_wrapped():
    async def theirs(spawner):
        return ["users:activity!user", f"read:users!user={spawner}"]

    c = config(GPUBurstSpawner=theirs)
    install(c)
    assert await c.GPUBurstSpawner.server_token_scopes("ann") == ["users:activity!user", "read:users!user=ann", *OURS]


@pytest.mark.parametrize(
    ("connect_host", "bind_host"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        # pods in network namespaces of their own reach the host on another loopback address:
        # the service listens there, and only there
        ("127.0.0.2", "127.0.0.2"),
        ("hub.jhub.svc.cluster.local", "0.0.0.0"),
    ],
)
def test_the_service_listens_where_it_is_reached(connect_host, bind_host):
    c = Config()
    c.JupyterHub.hub_connect_url = f"http://{connect_host}:8081"
    install(c)
    registered = service.registered()
    assert registered is not None and registered.bind_host == bind_host
    [entry] = [s for s in c.JupyterHub.services if s["name"] == "gpuburst"]
    assert entry["url"].startswith(f"http://{connect_host}:")
