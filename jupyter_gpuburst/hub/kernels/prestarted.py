"""Pre-started GPU kernels: a warm pool's kernel pods, and their adoption by the next kernel request.

A pooled kernel pod is a kernel pod of one profile pinned to one site, at the warm pools'
priority, whose entry point has imported ipykernel and waits for its connection file in a
Secret volume marked optional whose Secret does not exist yet: it holds no key, listens on
nothing and belongs to no one. Adoption, for a request placed on that site:

1. the hub creates the Secret (``create``, never ``apply``: one that someone made beforehand
   makes the pod unusable, not theirs), with the adopter's new key, owned by the pod;
2. it patches the pod: the pool's labels go, the kernel's labels, annotations and owner (the
   user's server pod) come, exactly as on a kernel pod it creates; the update makes the
   kubelet sync the pod's volumes, so the connection file appears and the kernel starts;
3. on the origin, it creates the kernel's own NetworkPolicy (``ingress``), owned by the pod:
   until then nothing reaches a waiting kernel, and from then on only the adopter's server.

On a donor, Liqo reflects the Secret and the pod's update apart, and the update may come first:
the donor's kubelet then syncs the pod before the Secret is there, and the connection file
appears only at its next periodic sync (a minute by default). So the hub updates the adopted
pod again a few seconds later (``VOLUME_SYNC_AFTER_S``), which syncs it with the Secret there.

The key is in the Secret only, never in the pod spec, env, the hub's log or its API. Liqo
reflects the Secret only where the kernel runs: never from the origin, and on a donor only from
that donor's kernel namespace (``manifests.kernel_namespace``); a waiting kernel elsewhere (a
donor's, in the servers' namespace, offloaded to every donor) is never adopted. A pod gone
(preempted, removed by its pool) at any step leaves nothing: the Secret is deleted (and owned by
the pod besides), and the request starts a pod of its own (``adopt`` returns False).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import replace
from typing import Any

from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.placement import GPURequest, Placement, decide, validate_request
from jupyter_gpuburst.hub.kernels import ingress, leftovers, manifests
from jupyter_gpuburst.hub.kernels.donorspace import server_namespace
from jupyter_gpuburst.hub.kernels.files import KernelFilesRequest, decide_files, scratch
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.pools import stale

# the registry (hub/kernels/registry) calls in here: its types are Any here, not imported back
KernelRegistry = KernelRecord = Any
CONNECTION_VOLUME = "gpuburst-connection"
CONNECTION_MOUNT = "/var/run/gpuburst/connection"
POD_PREFIX = "gpuburst-kernel-pool-"  # a kernel pod's prefix (registry.POD_PREFIX), then the pool's
PORT_SET = 0  # a first start's ports; a restart asks for the other set and starts cold
PAGE = 500  # pods of a pool read at once, where the hub's watch does not see its namespace
# the pool's labels on a pod that waits; gone once it is adopted
POOL_LABELS = (keys.POOL_LABEL, keys.POOL_SITE_LABEL, keys.POOL_PROFILE_LABEL, keys.POOL_KIND_LABEL)


# Waiting kernels this hub is adopting, "namespace/name" -> (until when, monotonic; the kernel
# record holding it): the warm pools leave them alone (a request's reservation would otherwise
# make its pool remove the very pod it is about to adopt, and a pass that listed the pod before
# its adoption must not remove it after), and so does every other request
CLAIMS: dict[str, tuple[float, str]] = {}
CLAIM_S = 60.0  # from before the request is placed until it adopts (or gives up): longer than a loaded hub takes
ADOPTED_HOLD_S = 30.0  # after: longer than a pools pass that listed it before takes
# after an adoption on a donor, the pod is updated again at these delays (s): Liqo's reflection
# takes well under a second when all is well, seconds on a busy link or a loaded machine
VOLUME_SYNC_AFTER_S = (2.0, 5.0)
_SYNCS: set[asyncio.Task] = set()  # the running second syncs (a task must be referenced to run)


def claimed(namespace: str, name: str) -> bool:
    """Whether the pods' pool must leave this waiting kernel alone: a request is adopting it."""
    return CLAIMS.get(f"{namespace}/{name}", (0.0, ""))[0] > time.monotonic()


def _take(pod: dict[str, Any], owner: str, seconds: float = CLAIM_S) -> bool:
    """Hold ``pod`` for ``owner`` (again): False while another request holds it. A holder whose
    time ran out (a hub loaded for longer than ``CLAIM_S``) has lost it to whoever took it
    since: it must not go on to adopt it, or two requests race for one kernel and its Secret
    (the loser would take the winner's adoption for a Secret someone else planted)."""
    now = time.monotonic()
    for held in [k for k, (until, _) in CLAIMS.items() if until <= now]:
        del CLAIMS[held]
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    if key in CLAIMS and CLAIMS[key][1] != owner:
        return False
    CLAIMS[key] = (now + seconds, owner)
    return True


def _hold(pod: dict[str, Any], owner: str, seconds: float) -> None:
    """Keep ``owner``'s hold on ``pod`` ``seconds`` longer, or let it go (0); another's is left."""
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    if CLAIMS.get(key, (0.0, owner))[1] != owner:
        return
    if seconds > 0:
        CLAIMS[key] = (time.monotonic() + seconds, owner)
    else:
        CLAIMS.pop(key, None)


def pool_name(site: str, profile: str) -> str:
    """The pool's name (its pods' POOL_LABEL), apart from a placeholder pool of the same slug."""
    return f"{site}.{profile}.kernels"


def pool_namespace(namespace: str, site: str) -> str:
    """Where a pool of pre-started kernels on ``site`` waits, the pools' namespace being
    ``namespace``: there on the origin; on a donor, in that donor's kernel namespace, the one
    place a request on that donor adopts from (its key's Secret reaches that donor alone)."""
    if site == keys.ORIGIN_SITE:
        return namespace
    return manifests.donor_kernel_namespace(namespace, site)


def site_placement(site: str, profile: KernelProfile) -> Placement:
    """Where a pooled kernel waits: the site, no node (the scheduler picks one)."""
    return Placement(
        site=site,
        cluster_id=None if site == keys.ORIGIN_SITE else site,
        node=None,
        resource=profile.resource,
        count=profile.count,
        reason="",
    )


def pooled_pod(
    site: str, profile: KernelProfile, settings: GPUKernelSettings, image: str, namespace: str, priority_class: str, preload: list[str]
) -> dict[str, Any]:
    """One pre-started kernel of ``profile`` on ``site``: a kernel pod as ``manifests.kernel_pod``
    makes it (security, resources, probe, scratch) with no user, no key and the pool's labels."""
    name = f"{POD_PREFIX}{secrets.token_hex(6)}"
    placement = site_placement(site, profile)
    files = scratch(placement)
    pod = manifests.kernel_pod(
        name=name,
        namespace=namespace,
        record_id="",
        user="",
        groups=[],
        server_name="",
        profile=profile,
        placement=placement,
        attempts=1,
        image=profile.pod_image(image),
        ports=settings.ports(PORT_SET),
        files=files,
        note=files.note,
        secret_name=name,
        server_pod=None,
        grace_seconds=settings.termination_grace_seconds,
        extra_env=dict(settings.extra_env),
        # the admin's command runs our entry point (in their environment): it waits the same way
        command=list(settings.command) or None,
        uid=settings.uid,
        gid=settings.gid,
        fs_gid=settings.fs_gid,
    )
    container = pod["spec"]["containers"][0]
    # who adopts it is not known yet: no user, no connection (the adopter's env brings them)
    container["env"] = [
        e for e in container["env"] if e["name"] not in (keys.KERNEL_CONNECTION_ENV, "JUPYTERHUB_USER", keys.REASON_ENV)
    ] + [
        {"name": keys.KERNEL_CONNECTION_DIR_ENV, "value": CONNECTION_MOUNT},
        {"name": keys.KERNEL_PRELOAD_ENV, "value": ",".join(preload)},
        {"name": keys.KERNEL_POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": keys.KERNEL_READY_PORT_ENV, "value": str(settings.ports(PORT_SET)["hb_port"])},
    ]
    container["volumeMounts"].append({"name": CONNECTION_VOLUME, "mountPath": CONNECTION_MOUNT, "readOnly": True})
    pod["spec"]["volumes"].append({"name": CONNECTION_VOLUME, "secret": {"secretName": name, "optional": True, "defaultMode": 0o400}})
    pod["spec"]["priorityClassName"] = priority_class
    pod["metadata"]["labels"] = {
        keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT,
        keys.VERSION_LABEL: pod["metadata"]["labels"][keys.VERSION_LABEL],
        keys.POOL_LABEL: pool_name(site, profile.slug),
        keys.POOL_SITE_LABEL: site,
        keys.POOL_PROFILE_LABEL: profile.slug,
        keys.POOL_KIND_LABEL: keys.POOL_KIND_KERNEL,
    }
    annotations = pod["metadata"]["annotations"]
    pod["metadata"]["annotations"] = {k: annotations[k] for k in (keys.PORTS_ANNOTATION, keys.PROFILE_ANNOTATION, keys.FILES_ANNOTATION)}
    return stale.stamp(pod, profile.pod_image(image))


def adoption_secret(
    pod: dict[str, Any], key: str, scheme: str, ports: dict[str, int], env: dict[str, str], placement: Placement
) -> dict[str, Any]:
    """The adopter's connection (its key) and env, owned by the pod it is for."""
    meta = pod["metadata"]
    secret = manifests.connection_secret(meta["name"], meta["namespace"], key, scheme, ports, placement)
    secret["data"][keys.KERNEL_ADOPTER_FILE] = base64.b64encode(json.dumps({"env": env}).encode()).decode()
    secret["metadata"]["ownerReferences"] = [manifests.owner_reference("Pod", meta["name"], meta["uid"])]
    return secret


def adoption_patch(
    pod: dict[str, Any], record: KernelRecord, placement: Placement, server_pod: dict[str, Any] | None, reason: str
) -> dict[str, Any]:
    """The pod made the adopter's kernel pod: labels, annotations and owner as ``kernel_pod`` sets them."""
    labels: dict[str, Any] = {k: None for k in POOL_LABELS}
    labels.update(manifests.kernel_labels(placement, record.id))
    annotations = {
        keys.REASON_ANNOTATION: reason,
        keys.USER_ANNOTATION: record.user,
        keys.GROUPS_ANNOTATION: json.dumps(sorted(record.groups)),
        keys.ATTEMPTS_ANNOTATION: str(len(record.attempts) + 1),
        keys.KERNEL_ANNOTATION: record.id,
        keys.SERVER_ANNOTATION: record.server_name,
        keys.PRESTARTED_ANNOTATION: (pod["metadata"].get("labels") or {}).get(keys.POOL_LABEL, ""),
    }
    if record.kernel_id:
        annotations[keys.JUPYTER_KERNEL_ANNOTATION] = record.kernel_id
    patch: dict[str, Any] = {"metadata": {"labels": labels, "annotations": annotations}}
    owner = manifests.server_owner(server_pod, pod["metadata"]["namespace"])
    if owner:
        patch["metadata"]["ownerReferences"] = owner
    return patch


async def candidates(
    registry: KernelRegistry, namespace: str, site: str, profile: str, prefer_node: str | None, image: str
) -> list[dict[str, Any]]:
    """Kernels of the pool that wait now (running, not being deleted, not claimed, this release's
    and made for ``image``: one an older hub left is its pool's to drain, ``pools.stale``): those
    on the reserved node if any, else the site's, the oldest first.

    Read from the hub's pod watch (``CapacityTracker.pool_pods``): at a lab's start every request
    listing its pool from the API server (hundreds of pods, read and parsed each time) was a fifth
    of the hub's busy time. A pod the watch has not yet seen go fails its adoption (the pod's
    update finds it gone) and the next one is tried, as with a list a moment old. Only a hub whose
    watch sees another namespace than the pool's (a namespaced Role) lists it.
    """
    pool = pool_name(site, profile)
    tracker = registry.tracker
    if tracker.pods_namespace in (None, namespace):
        pods = [p for p in tracker.pool_pods(pool) if p["metadata"].get("namespace") == namespace]
    else:
        pods = await _listed(registry, namespace, f"{keys.POOL_LABEL}={pool}")
    waiting = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and not claimed(p["metadata"]["namespace"], p["metadata"]["name"])
        and (p.get("spec") or {}).get("nodeName")
        and stale.stale(p, image) is None
    ]
    on_node = [p for p in waiting if p["spec"]["nodeName"] == prefer_node] if prefer_node else []
    # the oldest first among equals: it has waited longest, its imports are surely done
    return sorted(on_node or waiting, key=lambda p: p["metadata"].get("creationTimestamp", ""))


async def _listed(registry: KernelRegistry, namespace: str, labels: str) -> list[dict[str, Any]]:
    """The running pods of a pool, a page at a time."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        response = await registry.api.list_namespaced_pod(
            namespace, label_selector=labels, field_selector="status.phase=Running", limit=PAGE, _continue=token, _preload_content=False
        )
        body = json.loads(await response.read())
        items += body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items


async def claim(registry: KernelRegistry, record: KernelRecord, request: GPURequest) -> None:
    """Before a request is placed, hold a waiting kernel on the site placement would pick now
    (``record.claim``): the request's reservation then makes its pool remove no other."""
    slug = record.profile.slug
    if not any(profile == slug for _, profile in registry.prestarted) or record.ports != registry.settings.ports(PORT_SET):
        return
    try:
        validate_request(request, registry.tracker.placer.policy)
        decided = decide(request, registry.tracker.snapshot(), registry.tracker.placer.policy)
        if not isinstance(decided, Placement) or (decided.site, slug) not in registry.prestarted:
            return
        # the node its reservation will hold (placement names a node only where it pins one)
        namespace = manifests.kernel_namespace(record.namespace, decided)
        image = record.profile.pod_image(registry.image)
        found = await candidates(registry, namespace, decided.site, slug, decided.held_node or decided.node, image)
    except Exception:  # noqa: BLE001 - a bad request is refused by placement itself; no pool read: no claim
        registry.log.debug("GPU kernel %s: no pre-started kernel claimed", record.id, exc_info=True)
        return
    record.claim = next((pod for pod in found if _take(pod, record.id)), None)


async def adopt(
    registry: KernelRegistry, record: KernelRecord, placement: Placement, server_pod: Any, key: str, scheme: str, notebook_dir: str
) -> bool:
    """Make a waiting kernel of the placement's site the record's; False when none can be (none
    waits, the request needs its own ports or files, the pod went): the caller starts one."""
    held, record.claim = record.claim, None
    namespace = manifests.kernel_namespace(server_namespace(server_pod, record.namespace), placement)
    if held is not None and (
        held["metadata"]["labels"].get(keys.POOL_SITE_LABEL) != placement.site or held["metadata"]["namespace"] != namespace
    ):
        _hold(held, record.id, 0)  # placed elsewhere after all
        held = None
    try:
        return await _adopt_any(registry, record, placement, server_pod, key, scheme, notebook_dir, held)
    finally:
        if held is not None and record.pod_name != held["metadata"]["name"]:
            _hold(held, record.id, 0)


async def _adopt_any(
    registry: KernelRegistry,
    record: KernelRecord,
    placement: Placement,
    server_pod: Any,
    key: str,
    scheme: str,
    notebook_dir: str,
    held: dict[str, Any] | None,
) -> bool:
    profile = record.profile
    if (placement.site, profile.slug) not in registry.prestarted:
        return False
    # a restart asks for the other ports (and says where it restarted): the pod waiting has
    # the first ports and no note, so a restart starts its own
    if record.ports != registry.settings.ports(PORT_SET) or record.relocated_from:
        return False
    if registry.settings.files_policy is not None:
        # a waiting kernel has scratch space: a request the policy gives the user's files starts its own
        request = KernelFilesRequest(record.user, record.server_name, placement, notebook_dir, server_pod)
        files = await decide_files(registry.settings.files_policy, request)
        if files.mode != "scratch" or files.volumes != scratch(placement).volumes:
            return False
    if held is not None:
        found = [held]
    else:
        try:
            namespace = manifests.kernel_namespace(server_namespace(server_pod, record.namespace), placement)
            image = profile.pod_image(registry.image)
            found = await candidates(registry, namespace, placement.site, profile.slug, placement.held_node or placement.node, image)
        except Exception:  # noqa: BLE001 - no pool to read: the request starts its own pod
            registry.log.warning("GPU kernel %s: cannot list the pre-started kernels of %s", record.id, placement.site, exc_info=True)
            return False
    for pod in found:
        if not _take(pod, record.id):
            continue  # another request of this hub is adopting it (listed before, or its hold on it ran out)
        adopted = await _adopt_one(registry, record, placement, server_pod, key, scheme, pod)
        # adopted: its pool's pass that listed it before must still leave it be
        _hold(pod, record.id, ADOPTED_HOLD_S if adopted else 0)
        if adopted:
            return True
    return False


async def _adopt_one(
    registry: KernelRegistry, record: KernelRecord, placement: Placement, server_pod: Any, key: str, scheme: str, pod: dict[str, Any]
) -> bool:
    meta = pod["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    node = pod["spec"]["nodeName"]
    adopted = replace(placement, node=node if placement.node else placement.node, held_node=node)
    reason = f"{placement.reason} A pre-started kernel was waiting there.".strip()
    env = {"JUPYTERHUB_USER": record.user, keys.REASON_ENV: reason}
    try:
        await registry.api.create_namespaced_secret(namespace, adoption_secret(pod, key, scheme, record.ports, env, placement))
    except ApiException as exc:
        # the Secret's create is the lock: one adopter only. 409: another request adopted the
        # pod since it was listed (it carries that kernel now: leave it), or a Secret of that
        # name exists that the hub did not write: the pod may read someone else's key, so it
        # is nobody's; 404: the pod's namespace went
        if exc.status == 409 and await _adopted_since(registry, namespace, name):
            return False
        registry.log.warning("GPU kernel %s: pre-started kernel %s not adopted (%s); removing it", record.id, name, exc.status)
        await _remove(registry, namespace, name, secret=False)
        return False
    try:
        await registry.api.patch_namespaced_pod(name, namespace, adoption_patch(pod, record, adopted, server_pod, reason))
    except ApiException as exc:
        if exc.status == 403:
            # not gone: the hub may not adopt at all, and every kernel would start cold unseen
            registry.log.warning(
                "GPU kernel %s: the hub may not patch pods (403), so it cannot adopt pre-started kernel %s and starts one "
                "of its own; grant it with hub_config/rbac-kernels.yaml (gpuburst doctor checks it)",
                record.id,
                name,
            )
        else:
            # gone (preempted, removed by its pool) or changed meanwhile: nothing of it is kept
            registry.log.info("GPU kernel %s: pre-started kernel %s went before adoption (%s)", record.id, name, exc.status)
        await _remove(registry, namespace, name, secret=True, pod=exc.status != 404)
        return False
    record.placement = replace(adopted, reason=reason)
    record.namespace = namespace
    record.pod_name = name
    if not placement.is_donor and not await _admit_server(registry, record, meta["uid"]):
        record.pod_name = ""
        return False
    registry.tracker.own_namespace(namespace)  # a donor's kernel namespace: the watch follows its pods
    record.prestarted = True
    registry.log.info("GPU kernel %s of %s: adopted pre-started pod %s on %s", record.id, record.user, name, placement.site)
    if placement.is_donor:
        task = asyncio.create_task(_sync_again(registry, namespace, name), name=f"volume-sync-{name}")
        _SYNCS.add(task)
        task.add_done_callback(_SYNCS.discard)
    return True


async def _sync_again(registry: KernelRegistry, namespace: str, name: str) -> None:
    """Update the adopted pod after each of ``VOLUME_SYNC_AFTER_S`` (see the module docstring);
    a pod gone meanwhile ends it (its name, random, is never a later pod's)."""
    for count, delay in enumerate(VOLUME_SYNC_AFTER_S, start=1):
        await asyncio.sleep(delay)
        patch = {"metadata": {"annotations": {keys.VOLUME_SYNC_ANNOTATION: str(count)}}}
        try:
            await registry.api.patch_namespaced_pod(name, namespace, patch)
        except ApiException as exc:
            registry.log.debug("pre-started kernel %s: no second sync (%s)", name, exc.status)
            return


async def _admit_server(registry: KernelRegistry, record: KernelRecord, uid: str) -> bool:
    """Let the adopter's server into the adopted kernel (``ingress.admit_server``); a kernel
    nothing can reach is no one's: False, and the pod and its Secret go."""
    try:
        await ingress.admit_server(registry.networking, record, uid)
    except ApiException as exc:
        registry.log.warning(
            "GPU kernel %s: pre-started kernel %s removed: its network policy was refused (%s)%s",
            record.id,
            record.pod_name,
            exc.status,
            "; grant it with hub_config/rbac-kernels.yaml (gpuburst doctor checks it)" if exc.status == 403 else "",
        )
        await _remove(registry, record.namespace, record.pod_name, secret=True)
        return False
    return True


async def _adopted_since(registry: KernelRegistry, namespace: str, name: str) -> bool:
    try:
        pod = await registry.api.read_namespaced_pod(name, namespace)
    except ApiException:
        return False
    return bool((pod.metadata.annotations or {}).get(keys.KERNEL_ANNOTATION))


async def went(registry: KernelRegistry, record: KernelRecord, pod: dict[str, Any] | None, seen: bool) -> bool:
    """Whether an adopted pod is gone or going before its kernel answered: deleted (a
    preemption sets a grace period first), or ended. The hub's pod cache holds it only from
    its adoption's update on: one it has not seen yet is asked for (it may have gone before)."""
    if pod is None and not seen:
        try:
            read = await registry.api.read_namespaced_pod(record.pod_name, record.namespace)
        except ApiException as exc:
            return exc.status == 404
        return read.metadata.deletion_timestamp is not None or getattr(read.status, "phase", None) in ("Succeeded", "Failed")
    if pod is None:
        return True
    return bool(pod["metadata"].get("deletionTimestamp")) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


async def _remove(registry: KernelRegistry, namespace: str, name: str, *, secret: bool, pod: bool = True) -> None:
    if secret:
        await leftovers.delete_secret(registry, namespace, name)
    if pod:
        try:
            await registry.api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                registry.log.warning("Could not remove pre-started kernel %s/%s: %s", namespace, name, exc.status)
