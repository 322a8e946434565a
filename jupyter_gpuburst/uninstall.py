"""`gpuburst uninstall`: remove from the origin what jupyter-gpuburst made there, in an order that
leaves no namespace stuck.

Liqo's NamespaceOffloading carries a finalizer that its controller removes only once the
namespace it made on each donor is gone, and that one goes only with its pods: a NamespaceOffloading
deleted while pods still run on a virtual node leaves it, and the namespace holding it, stuck
terminating. So, in order, each step waiting for the one before to be gone:

1. the pods: user servers, GPU kernels and the warm pools' pods, in the user namespace and in
   each donor's kernel namespace (``<namespace>-kernels-<cluster id>``);
2. what the hub made beside them there: the kernels' Secrets and NetworkPolicies, the
   kernels' shared NetworkPolicy from hub_config/networkpolicy-kernels.yaml, and the hub's
   address in the user namespace (the Service ``hub`` and its EndpointSlice, hub/address/);
3. the NamespaceOffloadings of those namespaces (Liqo then removes the donors' namespaces);
4. the donors' kernel namespaces, and the warm pools' PriorityClass, the one cluster-wide object
   the hub makes.

The user namespace itself stays: it holds the students' home volumes. ``--dry-run`` says what
would go and deletes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.hub.address import manifests as address

SERVER_COMPONENT = "singleuser-server"  # KubeSpawner's label on a user's server pod
PODS = f"{keys.COMPONENT_LABEL} in ({SERVER_COMPONENT},{keys.KERNEL_COMPONENT},{keys.POOL_COMPONENT})"
KERNEL_OBJECTS = f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}"
SHIPPED = "app.kubernetes.io/name=jupyter-gpuburst"  # the label of the manifests in hub_config/
PRIORITY_CLASS = "gpuburst-warm-pool"


@dataclass(frozen=True)
class Found:
    """One object to delete: its kind as the output says it, namespace ('' cluster-wide), name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


class Uninstall:
    """The steps against one origin, through the ``kubernetes`` client's APIs."""

    def __init__(self, api_client: Any, namespace: str, priority_class: str, out: Callable[[str], None] = print) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.discovery = client.DiscoveryV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)
        self.namespace = namespace
        self.priority_class = priority_class
        self.out = out

    def namespaces(self) -> list[str]:
        """The user namespace and each donor's kernel namespace."""
        prefix = f"{self.namespace}-kernels-"
        donors = sorted(n.metadata.name for n in self.core.list_namespace().items if n.metadata.name.startswith(prefix))
        return [self.namespace, *donors]

    def pods(self, namespaces: list[str]) -> list[Found]:
        return [
            Found("pod", ns, p.metadata.name) for ns in namespaces for p in self.core.list_namespaced_pod(ns, label_selector=PODS).items
        ]

    def beside(self, namespaces: list[str]) -> list[Found]:
        found = []
        for ns in namespaces:
            found += [
                Found("secret", ns, s.metadata.name) for s in self.core.list_namespaced_secret(ns, label_selector=KERNEL_OBJECTS).items
            ]
            for selector in (KERNEL_OBJECTS, SHIPPED):
                policies = self.networking.list_namespaced_network_policy(ns, label_selector=selector).items
                found += [Found("networkpolicy", ns, p.metadata.name) for p in policies]
        # the hub writes its address again every minute: stop the hub before uninstalling
        user_namespace = namespaces[0]
        services = self.core.list_namespaced_service(user_namespace, label_selector=address.SELECTOR).items
        slices = self.discovery.list_namespaced_endpoint_slice(user_namespace, label_selector=address.SELECTOR).items
        found += [Found("service", user_namespace, s.metadata.name) for s in services]
        found += [Found("endpointslice", user_namespace, s.metadata.name) for s in slices]
        return found

    def offloadings(self, namespaces: list[str]) -> list[Found]:
        found = []
        for ns in namespaces:
            listed = self.custom.list_namespaced_custom_object(
                liqo.OFFLOADING_GROUP, liqo.OFFLOADING_VERSION, ns, liqo.NAMESPACE_OFFLOADING_PLURAL
            )
            found += [Found("namespaceoffloading", ns, o["metadata"]["name"]) for o in listed.get("items") or []]
        return found

    def last(self, namespaces: list[str]) -> list[Found]:
        found = [Found("namespace", "", ns) for ns in namespaces[1:]]
        if any(c.metadata.name == self.priority_class for c in self.scheduling.list_priority_class().items):
            found.append(Found("priorityclass", "", self.priority_class))
        return found

    def delete(self, what: Found) -> None:
        from kubernetes.client.exceptions import ApiException

        calls = {
            "pod": lambda: self.core.delete_namespaced_pod(what.name, what.namespace),
            "secret": lambda: self.core.delete_namespaced_secret(what.name, what.namespace),
            "networkpolicy": lambda: self.networking.delete_namespaced_network_policy(what.name, what.namespace),
            "service": lambda: self.core.delete_namespaced_service(what.name, what.namespace),
            "endpointslice": lambda: self.discovery.delete_namespaced_endpoint_slice(what.name, what.namespace),
            "namespaceoffloading": lambda: self.custom.delete_namespaced_custom_object(
                liqo.OFFLOADING_GROUP, liqo.OFFLOADING_VERSION, what.namespace, liqo.NAMESPACE_OFFLOADING_PLURAL, what.name
            ),
            "namespace": lambda: self.core.delete_namespace(what.name),
            "priorityclass": lambda: self.scheduling.delete_priority_class(what.name),
        }
        try:
            calls[what.kind]()
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile is what was asked
                raise

    def run(self, dry_run: bool, timeout: float) -> int:
        namespaces = self.namespaces()
        steps: list[tuple[str, Callable[[list[str]], list[Found]]]] = [
            ("user servers, GPU kernels and warm pool pods", self.pods),
            ("the kernels' Secrets and network policies, and the hub's address", self.beside),
            ("the NamespaceOffloadings (Liqo removes the donors' namespaces)", self.offloadings),
            ("the donors' kernel namespaces and the warm pools' PriorityClass", self.last),
        ]
        verb = "would delete" if dry_run else "deleting"
        for step, (title, find) in enumerate(steps, 1):
            found = find(namespaces)
            self.out(f"{title}: {len(found) or 'none'}")
            for what in found:
                self.out(f"  {verb} {what}")
                if not dry_run:
                    self.delete(what)
            # the last step's namespaces go on terminating on their own: nothing waits on them
            if found and not dry_run and step < len(steps) and not self._gone(find, namespaces, timeout):
                left = ", ".join(map(str, find(namespaces)))
                self.out(
                    f"still there after {timeout:.0f} s: {left}; the next steps would leave a namespace stuck, so they wait: run this again"
                )
                return 1
        self.out(
            f"the user namespace {self.namespace} stays, with the students' home volumes: "
            f"kubectl delete namespace {self.namespace} once they are backed up"
        )
        return 0

    def _gone(self, find: Callable[[list[str]], list[Found]], namespaces: list[str], timeout: float) -> bool:
        """Until what ``find`` finds is gone (a pod on a donor goes once Liqo removed its copy)."""
        deadline = time.monotonic() + timeout
        while find(namespaces):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst uninstall", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", "--namespace", required=True, help="the namespace user servers run in (KubeSpawner.namespace)")
    parser.add_argument("--priority-class", default=PRIORITY_CLASS, help=f"WarmPools.priority_class (default: {PRIORITY_CLASS})")
    parser.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each step's objects to go (default: 300)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    args = parser.parse_args(argv)
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        uninstall = Uninstall(api_client(args.kubeconfig, args.context), args.namespace, args.priority_class)
        return uninstall.run(args.dry_run, args.timeout)
    except ValueError as exc:
        print(f"gpuburst uninstall: {exc}", file=sys.stderr)
        return 2
    except ApiException as exc:
        print(f"gpuburst uninstall: the cluster refused: {exc.status} {exc.reason}", file=sys.stderr)
        return 2
    except HTTPError as exc:
        print(f"gpuburst uninstall: cannot reach the cluster: {exc}", file=sys.stderr)
        return 2


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A client of the kubeconfig's context, or in the cluster (a pod's service account) where
    there is no kubeconfig; ValueError with the reason where neither loads."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    try:
        if kubeconfig is None and not os.path.exists(path) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            return client.ApiClient()
        return config.new_client_from_config(config_file=path, context=context)
    except (ConfigException, OSError) as exc:
        raise ValueError(f"cannot load kubeconfig {path}: {exc}") from None
