"""Connecting doctor to a cluster: the official ``kubernetes`` client as a ``ClusterView``, from
the kubeconfig (``--kubeconfig`` / ``--context``) or the hub pod's service account."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from jupyter_gpuburst import __version__
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.doctor.view import ClusterUnreachable, NotPermitted

DEFAULT_NAMESPACE = "default"
# doctor's requests name it, as kubectl's do: run with the hub's own token, an API server's audit
# log still tells them from the hub's
USER_AGENT_PRODUCT = "gpuburst-doctor"
USER_AGENT = f"{USER_AGENT_PRODUCT}/{__version__}"
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class KubernetesCluster:
    """``ClusterView`` over the official ``kubernetes`` client.

    Responses are read raw (``_preload_content=False``) so the checks see exactly the JSON the
    API server sent, the same shape the watch-driven inventory sees inside the hub.
    """

    def __init__(self, api_client: Any) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._apis = client.ApisApi(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._storage = client.StorageV1Api(api_client)

    @staticmethod
    def _json(response: Any) -> Any:
        return json.loads(response.data)

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._json(func(*args, _preload_content=False, **kwargs))
        except ApiException as exc:
            if exc.status in (401, 403):
                raise NotPermitted(f"this identity may not {what}") from exc
            raise
        except (HTTPError, OSError) as exc:
            raise ClusterUnreachable(f"cannot {what}: {exc}") from exc

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._call("list nodes", self._core.list_node).get("items") or []

    def list_pods(self) -> list[dict[str, Any]]:
        return self._call("list pods", self._core.list_pod_for_all_namespaces).get("items") or []

    def api_groups(self) -> set[str]:
        groups = self._call("read API groups", self._apis.get_api_versions).get("groups") or []
        return {g.get("name", "") for g in groups}

    def access_review(self, verb: str, group: str, resource: str, namespace: str | None) -> tuple[bool, str]:
        attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
        if namespace:
            attributes["namespace"] = namespace
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = self._call("create a SelfSubjectAccessReview", self._authz.create_self_subject_access_review, body)
        status = answer.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")

    def namespace_offloading(self, namespace: str) -> dict[str, Any] | None:

        try:
            return self._call(
                "read the NamespaceOffloading",
                self._custom.get_namespaced_custom_object,
                liqo.OFFLOADING_GROUP,
                liqo.OFFLOADING_VERSION,
                namespace,
                liqo.NAMESPACE_OFFLOADING_PLURAL,
                liqo.NAMESPACE_OFFLOADING_NAME,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_storage_classes(self) -> list[dict[str, Any]]:
        return self._call("list storage classes", self._storage.list_storage_class).get("items") or []

    def vk_options_templates(self) -> list[dict[str, Any]]:
        """Liqo's virtual kubelet templates (none where Liqo predates them)."""
        try:
            answer = self._call(
                "list Liqo's virtual kubelet templates",
                self._custom.list_cluster_custom_object,
                liqo.OFFLOADING_GROUP,
                liqo.OFFLOADING_VERSION,
                liqo.VK_OPTIONS_TEMPLATE_PLURAL,
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return answer.get("items") or []


@dataclass(frozen=True)
class Connection:
    cluster: KubernetesCluster
    context: str
    namespace: str
    server: str


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    impersonate: str | None = None,
    impersonate_group: str | None = None,
) -> Connection:
    """Open a client for ``kubeconfig``/``context`` (or in-cluster config when there is none).

    ``impersonate`` asks every question as another identity (``--as``, like kubectl), e.g. the
    hub's service account ``system:serviceaccount:jhub:hub``; the caller needs ``impersonate``
    rights for that.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if kubeconfig is None and not os.path.exists(path) and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        api_client = client.ApiClient(configuration)
        ctx_name, ctx_namespace = "in-cluster", _service_account_namespace()
    else:
        if not os.path.exists(path):
            raise ClusterUnreachable(f"no kubeconfig at {path}; pass --kubeconfig or set KUBECONFIG")
        try:
            contexts, active = config.list_kube_config_contexts(config_file=path)
            chosen = active
            if context is not None:
                matches = [c for c in contexts if c["name"] == context]
                if not matches:
                    names = ", ".join(sorted(c["name"] for c in contexts))
                    raise ClusterUnreachable(f"context {context!r} is not in {path} (contexts: {names})")
                chosen = matches[0]
            api_client = config.new_client_from_config(config_file=path, context=chosen["name"])
        except ConfigException as exc:
            raise ClusterUnreachable(f"cannot load kubeconfig {path}: {exc}") from exc
        ctx_name = chosen["name"]
        ctx_namespace = (chosen.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
    api_client.user_agent = USER_AGENT
    if impersonate:
        api_client.set_default_header("Impersonate-User", impersonate)
        if impersonate_group:
            # The generated client sends one value per header name, hence a single group.
            api_client.set_default_header("Impersonate-Group", impersonate_group)
    elif impersonate_group:
        raise ClusterUnreachable("--as-group needs --as")
    return Connection(
        cluster=KubernetesCluster(api_client),
        context=ctx_name,
        namespace=namespace or ctx_namespace,
        server=api_client.configuration.host,
    )


def _service_account_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE_FILE) as fh:
            return fh.read().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE
