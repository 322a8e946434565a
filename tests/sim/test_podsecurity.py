"""Pod Security admission's enforce mode in the emulator, held to what kube-apiserver 1.35 answered
for the same pods (its words copied here from a run of tests/kube's control plane): the level a
namespace's label enforces, which checks each level runs, and the message, word for word."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store


def container(name: str, **context) -> dict:
    return {"name": name, "image": "python", **({"securityContext": context} if context else {})}


# z2jh's server with its iptables init container and without it, a restricted kernel, and pods
# that break every modelled check at once
PODS = {
    "z2jh-blocked": {
        "securityContext": {"fsGroup": 100},
        "initContainers": [container("block-cloud-metadata", privileged=True, runAsUser=0, capabilities={"add": ["NET_ADMIN"]})],
        "containers": [container("notebook", runAsUser=1000, allowPrivilegeEscalation=False)],
    },
    "z2jh-open": {
        "securityContext": {"fsGroup": 100},
        "containers": [container("notebook", runAsUser=1000, allowPrivilegeEscalation=False)],
    },
    "kernel": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container("kernel", allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]})],
        "volumes": [{"name": "s", "emptyDir": {}}],
    },
    "everything": {
        "hostNetwork": True,
        "hostPID": True,
        "securityContext": {"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}},
        "volumes": [{"name": "h", "hostPath": {"path": "/tmp"}}, {"name": "n", "nfs": {"server": "x", "path": "/"}}],
        "containers": [
            {
                **container("a", runAsNonRoot=False, capabilities={"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}),
                "ports": [{"containerPort": 8080, "hostPort": 8080}, {"containerPort": 9090, "hostPort": 9090}],
            },
            container("b", seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),
        ],
    },
    "mixed": {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True},
        "containers": [
            container("a", seccompProfile={"type": "Unconfined"}, allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]}),
            container("b", allowPrivilegeEscalation=True),
        ],
    },
}
# "<level>/<pod>": the API server's refusal, or "" where it admitted the pod
REAL = {
    "baseline/z2jh-blocked": 'pods "z2jh-blocked" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container "block-cloud-metadata" must not include "NET_ADMIN" in securityContext.capabilities.add), privileged (container "block-cloud-metadata" must not set securityContext.privileged=true)',
    "baseline/z2jh-open": "",
    "baseline/kernel": "",
    "baseline/everything": 'pods "everything" is forbidden: violates PodSecurity "baseline:latest": non-default capabilities (container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add), host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume "h"), hostPort (container "a" uses hostPorts 8080, 9090), seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
    "baseline/mixed": 'pods "mixed" is forbidden: violates PodSecurity "baseline:latest": seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined")',
    "restricted/z2jh-blocked": 'pods "z2jh-blocked" is forbidden: violates PodSecurity "restricted:latest": privileged (container "block-cloud-metadata" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container "block-cloud-metadata" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (containers "block-cloud-metadata", "notebook" must set securityContext.capabilities.drop=["ALL"]; container "block-cloud-metadata" must not include "NET_ADMIN" in securityContext.capabilities.add), runAsNonRoot != true (pod or containers "block-cloud-metadata", "notebook" must set securityContext.runAsNonRoot=true), runAsUser=0 (container "block-cloud-metadata" must not set runAsUser=0), seccompProfile (pod or containers "block-cloud-metadata", "notebook" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    "restricted/z2jh-open": 'pods "z2jh-open" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "notebook" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "notebook" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "notebook" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    "restricted/kernel": "",
    "restricted/everything": 'pods "everything" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true, hostPID=true), hostPort (container "a" uses hostPorts 8080, 9090), allowPrivilegeEscalation != false (containers "a", "b" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add), restricted volume types (volumes "h", "n" use restricted volume types "hostPath", "nfs"), runAsNonRoot != true (container "a" must not set securityContext.runAsNonRoot=false), runAsUser=0 (pod must not set runAsUser=0), seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
    "restricted/mixed": 'pods "mixed" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "b" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "b" must set securityContext.capabilities.drop=["ALL"]), seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined")',
}


@pytest.mark.parametrize("case", sorted(REAL))
def test_enforce_refuses_as_the_api_server_does(case):
    level, name = case.split("/")
    store = Store()
    store.create("namespaces", {"metadata": {"name": "ns", "labels": podsecurity.namespace_labels(enforce=level)}})
    pod = {"metadata": {"name": name}, "spec": PODS[name]}
    if not REAL[case]:
        store.create("pods", pod, "ns")
        return
    with pytest.raises(ApiError) as refused:
        store.create("pods", pod, "ns")
    assert (refused.value.code, refused.value.message) == (403, REAL[case])
    assert not store.exists("pods", "ns", name)


def test_an_unlabelled_namespace_admits_a_privileged_pod_and_warn_and_audit_refuse_nothing():
    store = Store()
    labels = podsecurity.namespace_labels(warn="restricted", audit="restricted")
    store.create("namespaces", {"metadata": {"name": "reported", "labels": labels}})
    store.create("pods", {"metadata": {"name": "root"}, "spec": PODS["z2jh-blocked"]})
    store.create("pods", {"metadata": {"name": "root"}, "spec": PODS["z2jh-blocked"]}, "reported")
    assert store.exists("pods", "default", "root") and store.exists("pods", "reported", "root")
