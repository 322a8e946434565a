"""The real-cluster tier: everything it needs comes from the environment (see tests/REALCLUSTER.md).

These fixtures only use the kubeconfig in ``GPUBURST_KUBECONFIG``; nothing here knows whether
the API server behind it is a production cluster or the local federation.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

DEFAULT_IMAGE = "quay.io/jupyterhub/singleuser:5"
DEFAULT_TEST_IMAGE = "busybox:1.36"
DEFAULT_PYTHON_IMAGE = "python:3.12-slim"
NAMESPACE_PREFIX = "gpuburst-test-"


class ConfigError(ValueError):
    """A GPUBURST_* variable of the real-cluster tier has a value that cannot work."""


@dataclass(frozen=True)
class RealCluster:
    """The tier's settings, read once from ``GPUBURST_*`` environment variables."""

    kubeconfig: Path
    context: str | None
    namespace: str | None  # None: a fresh namespace is created (and deleted) by the tests
    gpu_count: int
    gpu_resource: str
    hub_connect_url: str | None
    hub_bind_ip: str
    image: str
    test_image: str
    python_image: str
    start_timeout: int

    @classmethod
    def from_env(cls, env: os._Environ | dict[str, str] = os.environ) -> "RealCluster":
        kubeconfig = Path(env["GPUBURST_KUBECONFIG"]).expanduser()
        if not kubeconfig.is_file():
            raise ConfigError(f"GPUBURST_KUBECONFIG={kubeconfig} is not a file")
        count = _positive_int(env, "GPUBURST_GPU_COUNT", 1)
        connect_url = env.get("GPUBURST_HUB_CONNECT_URL") or None
        if connect_url is not None:
            parts = urlsplit(connect_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"GPUBURST_HUB_CONNECT_URL={connect_url!r} is not an http(s) URL with a host")
        return cls(
            kubeconfig=kubeconfig,
            context=env.get("GPUBURST_CONTEXT") or None,
            namespace=env.get("GPUBURST_NAMESPACE") or None,
            gpu_count=count,
            gpu_resource=env.get("GPUBURST_GPU_RESOURCE") or "nvidia.com/gpu",
            hub_connect_url=connect_url,
            hub_bind_ip=env.get("GPUBURST_HUB_BIND_IP") or "0.0.0.0",
            image=env.get("GPUBURST_SINGLEUSER_IMAGE") or DEFAULT_IMAGE,
            test_image=env.get("GPUBURST_TEST_IMAGE") or DEFAULT_TEST_IMAGE,
            python_image=env.get("GPUBURST_PYTHON_IMAGE") or DEFAULT_PYTHON_IMAGE,
            start_timeout=_positive_int(env, "GPUBURST_START_TIMEOUT", 300),
        )

    @property
    def hub_port(self) -> int:
        """The port the test hub listens on: the connect URL's (a tunnel must keep it)."""
        assert self.hub_connect_url is not None
        parts = urlsplit(self.hub_connect_url)
        return parts.port or (443 if parts.scheme == "https" else 80)


def _positive_int(env: Any, name: str, default: int) -> int:
    raw = env.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < 1:
        raise ConfigError(f"{name}={raw!r} must be at least 1")
    return value


@pytest.fixture(scope="session")
def real_cluster() -> RealCluster:
    return RealCluster.from_env()


@pytest.fixture(scope="session")
def kube_client(real_cluster: RealCluster) -> Iterator[Any]:
    """A synchronous ``kubernetes`` ApiClient for the configured kubeconfig and context."""
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(real_cluster.kubeconfig), context=real_cluster.context)
    yield api_client
    api_client.close()


@pytest.fixture(scope="session")
def core_v1(kube_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube_client)


@pytest.fixture(scope="session")
def custom_objects(kube_client: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(kube_client)


@pytest.fixture(scope="session")
def test_namespace(real_cluster: RealCluster, core_v1: Any) -> Iterator[str]:
    """GPUBURST_NAMESPACE as given, or a fresh ``gpuburst-test-<random>`` deleted at the end."""
    if real_cluster.namespace is not None:
        core_v1.read_namespace(real_cluster.namespace)  # a clear 404 now rather than odd failures later
        yield real_cluster.namespace
        return
    name = NAMESPACE_PREFIX + secrets.token_hex(3)
    core_v1.create_namespace(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "jupyter-gpuburst-tests"}},
        }
    )
    try:
        yield name
    finally:
        core_v1.delete_namespace(name)
        _wait_namespace_gone(core_v1, name, timeout=30)


def _wait_namespace_gone(core_v1: Any, name: str, timeout: float) -> None:
    """Wait a little for the namespace's pods to go; a real cluster may finish it later."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core_v1.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)


@pytest.fixture
def hub_kubeconfig(real_cluster: RealCluster, tmp_path: Path) -> Iterator[Path]:
    """The kubeconfig the hub process reads (KubeSpawner always uses the current context).

    With GPUBURST_CONTEXT a private copy names that context current; it is removed afterwards
    because it carries the cluster credentials.
    """
    if real_cluster.context is None:
        yield real_cluster.kubeconfig
        return
    data = yaml.safe_load(real_cluster.kubeconfig.read_text())
    names = [c.get("name") for c in data.get("contexts") or []]
    if real_cluster.context not in names:
        raise ConfigError(f"GPUBURST_CONTEXT={real_cluster.context!r} is not in {real_cluster.kubeconfig} (contexts: {names})")
    data["current-context"] = real_cluster.context
    path = tmp_path / "hub.kubeconfig"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(data, out)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
