"""What the real API server's admission says of what the hub sends, over the whole kube tier (this
file runs after the tier's integration tests, from the origin's audit log they leave):

- Pod Security: the users' namespace is labelled ``warn`` and ``audit`` ``restricted``
  (helpers/kubetier.py), so the audit log annotates each pod that breaks it; GPU kernel pods, cold
  and pre-started, break nothing, and are admitted where ``restricted`` is enforced (a donor's
  kernel namespace), as the warm pools' placeholders are. User servers as KubeSpawner renders
  them with z2jh's values need ``privileged`` (z2jh's iptables init container), ``baseline``
  without it: docs/security.md says so, and this shows it.
- Strict field validation: every create, update and patch the hub made (its body in the log) is
  sent again as a dry run with ``fieldValidation=Strict``: no error, no warning. Secrets' bodies
  are not logged: the kernels' Secrets are built here and sent the same way.
"""

from __future__ import annotations

import copy

import pytest
from helpers.kubetier import ADMIN_MANIFESTS, HUB_USER, NAMESPACES, NOT_THE_HUB, collected_audit
from kubernetes_asyncio.client import ApiClient
from kubespawner.objects import make_pod

from jupyter_gpuburst.core import keys, podsecurity
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.pools.manifests import placeholder_pod
from jupyter_gpuburst.hub.pools.settings import Pool, Shape
from jupyter_gpuburst.sim.kube import audit
from jupyter_gpuburst.sim.kube.hubaccount import apply_as_admin, documents
from jupyter_gpuburst.sim.kube.replay import Replayer

pytestmark = pytest.mark.kube
USERS = NAMESPACES["jhub-users"]
SERVER_COMPONENT = "singleuser-server"  # KubeSpawner's component label
WARM_POOL_CLASS = next(d["metadata"]["name"] for d in documents(ADMIN_MANIFESTS) if d["kind"] == "PriorityClass")


def hub_writes(tmp_path_factory) -> list[dict]:
    return list(audit.writes(collected_audit(tmp_path_factory), HUB_USER, not_from=NOT_THE_HUB))


def pod_creates(writes: list[dict]) -> dict[str, list[dict]]:
    """The hub's pod creates by kind: cold kernels, pre-started kernels, placeholders, servers."""
    kinds: dict[str, list[dict]] = {"kernel": [], "pre-started kernel": [], "placeholder": [], "server": []}
    for event in writes:
        if event["verb"] != "create" or event["objectRef"]["resource"] != "pods":
            continue
        labels = event["requestObject"]["metadata"].get("labels") or {}
        component = labels.get(keys.COMPONENT_LABEL)
        if component == keys.KERNEL_COMPONENT:
            kinds["pre-started kernel" if keys.POOL_LABEL in labels else "kernel"].append(event)
        elif component == keys.POOL_COMPONENT:
            kinds["placeholder"].append(event)
        elif component == SERVER_COMPONENT:
            kinds["server"].append(event)
    return kinds


def test_gpu_kernel_pods_break_no_restricted_rule_where_they_share_the_servers_namespace(tmp_path_factory):
    kinds = pod_creates(hub_writes(tmp_path_factory))
    for kind in ("kernel", "pre-started kernel", "server"):
        assert kinds[kind], f"the tier's hub created no {kind} pod: the check would pass on nothing"
    violations = {
        f"{kind} {e['objectRef'].get('name')}": e["annotations"][podsecurity.AUDIT_VIOLATIONS]
        for kind in ("kernel", "pre-started kernel", "placeholder")
        for e in kinds[kind]
        if podsecurity.AUDIT_VIOLATIONS in (e.get("annotations") or {})
    }
    assert not violations, f"pods the hub made break the restricted Pod Security Standard: {violations}"
    # the namespace's audit level is on: the tier's servers (KubeSpawner's defaults) do break it
    assert all(podsecurity.AUDIT_VIOLATIONS in (e.get("annotations") or {}) for e in kinds["server"]), (
        f"no audit violations recorded for the servers in {USERS}: is it labelled audit=restricted?"
    )


def _pod_in(body: dict, namespace: str) -> dict:
    pod = {k: v for k, v in body.items() if k != "status"}
    pod["metadata"] = {k: v for k, v in body["metadata"].items() if k not in ("namespace", "ownerReferences", "uid")}
    pod["metadata"]["namespace"] = namespace
    return pod


def z2jh_server_pod(namespace: str, block_cloud_metadata: bool) -> dict:
    """A user server's pod as KubeSpawner renders it with z2jh 4.4's singleuser values (uid 1000,
    fsGid 100, allowPrivilegeEscalation false) and, with cloudMetadata.blockWithIptables (its
    default), the init container z2jh's jupyterhub_config.py adds."""
    init = []
    if block_cloud_metadata:
        init = [
            {
                "name": "block-cloud-metadata",
                "image": "quay.io/jupyterhub/k8s-network-tools:4.4.0",
                "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination", "169.254.169.254"]
                + ["--destination-port", "80", "--jump", "DROP"],
                "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}},
            }
        ]
    pod = make_pod(
        name="jupyter-alice",
        cmd=["jupyterhub-singleuser"],
        port=8888,
        image="quay.io/jupyterhub/k8s-singleuser-sample:4.4.0",
        uid=1000,
        fs_gid=100,
        allow_privilege_escalation=False,
        init_containers=init,
        labels={keys.COMPONENT_LABEL: SERVER_COMPONENT},
    )
    body = ApiClient().sanitize_for_serialization(pod)
    body["metadata"]["namespace"] = namespace
    return body


def admission(replayer: Replayer, namespace: str, pod: dict) -> str:
    """ "admitted" or the API server's refusal, for ``pod`` created (as a dry run) in ``namespace``."""
    findings = replayer.check(f"/api/v1/namespaces/{namespace}/pods", _pod_in(pod, namespace))
    return "; ".join(str(f) for f in findings) or "admitted"


async def test_the_api_server_admits_what_the_hub_sends_strictly_and_at_the_stated_levels(federation, tmp_path_factory):
    writes = hub_writes(tmp_path_factory)
    origin = federation.origin
    apply_as_admin(origin, ADMIN_MANIFESTS, NAMESPACES)
    levels = {level: f"psa-{level}" for level in podsecurity.LEVELS}
    for level, namespace in levels.items():
        labels = podsecurity.namespace_labels(enforce=level)
        origin.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}})
    replayer = Replayer(origin.url, origin.credentials())
    try:
        problems = [str(f) for f in replayer.replay(writes)]
        assert replayer.sent >= len(writes), "fewer writes sent again than the log holds"
        # the replay tells: one of the hub's pods with a field Kubernetes does not know is refused
        doctored = copy.deepcopy(next(e for e in writes if e["verb"] == "create" and e["objectRef"]["resource"] == "pods"))
        doctored["requestObject"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
        told = [str(f) for f in replayer.replay([doctored])]
        assert len(told) == 1 and 'unknown field "spec.containers[0].imagePulPolicy"' in told[0], told
        # the Secrets, whose bodies the log leaves out, as the hub builds them
        placement = Placement(site="origin", cluster_id=None, node=None, resource="nvidia.com/gpu", count=1, reason="test")
        secret = manifests.connection_secret("kernel-x", USERS, "not-a-key", "hmac-sha256", {"shell_port": 1}, placement)
        secret["metadata"]["ownerReferences"] = [manifests.owner_reference("Pod", "kernel-x", "0000")]
        problems += [str(f) for f in replayer.check(f"/api/v1/namespaces/{USERS}/secrets", secret)]
        assert not problems, "the API server, sent the hub's writes strictly:\n" + "\n".join(problems)

        # where only kernels run, restricted is enforced: each kernel pod the hub made is admitted
        kinds = pod_creates(writes)
        placeholder = placeholder_pod(
            Pool("origin", "gpu-1", 1), Shape("python", {"cpu": "100m"}, {"nvidia.com/gpu": "1"}), USERS, WARM_POOL_CLASS
        )
        pods = [e["requestObject"] for kind in ("kernel", "pre-started kernel") for e in kinds[kind]] + [placeholder]
        refused = {p["metadata"].get("name") or p["metadata"]["generateName"]: admission(replayer, levels["restricted"], p) for p in pods}
        assert set(refused.values()) == {"admitted"}, refused

        # user servers as z2jh renders them: privileged with its iptables init container, else baseline
        blocked, open_ = z2jh_server_pod(USERS, True), z2jh_server_pod(USERS, False)
        seen = {
            (level, blocks): admission(replayer, namespace, blocked if blocks else open_)
            for level, namespace in levels.items()
            for blocks in (True, False)
        }
        assert seen[("privileged", True)] == seen[("baseline", False)] == "admitted", seen
        assert "privileged" in seen[("baseline", True)] and "NET_ADMIN" in seen[("baseline", True)], seen
        assert "seccompProfile" in seen[("restricted", False)] and "runAsNonRoot" in seen[("restricted", False)], seen
    finally:
        replayer.close()
