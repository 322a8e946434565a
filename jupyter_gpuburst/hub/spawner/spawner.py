"""GPUBurstSpawner: KubeSpawner that places GPU servers on the origin or on a Liqo donor.

The decision is taken where KubeSpawner builds the pod (``get_pod_manifest``), after the chosen
profile's overrides are applied, from the per-process ``CapacityTracker``'s snapshot; a spawn
never lists nodes or pods. ``_start`` wraps KubeSpawner's start with a watcher that, when the
pod turns unschedulable for its GPUs (or waits on a donor past a grace period), deletes it and
starts again on a site not yet tried. The pod name never changes, so one server never has two
pods.

Longer than 600 lines: it is one class, KubeSpawner's subclass, whose overrides share the
spawn's state; what does not need that state lives beside it in this folder (form, messages,
state, podrequest, cpu_servers).
"""

from __future__ import annotations

import asyncio
import copy
import html
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client import V1Affinity, V1EnvVar, V1NodeAffinity, V1Toleration, V1Volume
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner import KubeSpawner
from kubespawner.utils import get_k8s_model
from tornado import web
from traitlets import TraitError, default

from jupyter_gpuburst import __version__
from jupyter_gpuburst.core import images, keys, names, release
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, PlacementInputError
from jupyter_gpuburst.hub import metrics, retry
from jupyter_gpuburst.hub.accounting.gate import budget_note, budget_refusal
from jupyter_gpuburst.hub.accounting.rightsizing import suggestion_for
from jupyter_gpuburst.hub.capacity import watch
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker, server_key
from jupyter_gpuburst.hub.kernels.service import stop_server_kernels
from jupyter_gpuburst.hub.profiles import policy as profile_policy
from jupyter_gpuburst.hub.profiles.options import (
    ProfileGPU,
    UserOptionsError,
    profile_block,
    validate_user_options,
)
from jupyter_gpuburst.hub.queue import classes as lab_classes
from jupyter_gpuburst.hub.queue import wait as queue_wait
from jupyter_gpuburst.hub.service import server_env as service_env
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.hub.sites import storage
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader, OffloadingPermissionError
from jupyter_gpuburst.hub.sites.unschedulable import started_on_donor, unschedulable_reason
from jupyter_gpuburst.hub.spawner import cpu_servers
from jupyter_gpuburst.hub.spawner import form as spawn_form
from jupyter_gpuburst.hub.spawner import messages as spawn_messages
from jupyter_gpuburst.hub.spawner import state as spawnstate
from jupyter_gpuburst.hub.spawner.donorrefusal import DonorRefusals
from jupyter_gpuburst.hub.spawner.podrequest import RESOURCE_TRAITS, pod_spec_from_traits, request_of_pod

TEMPLATES = Path(__file__).parent.parent / "templates"


class SpawnRefused(web.HTTPError):
    """A spawn that cannot go ahead, with a message meant for the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, "%s", message)
        self.jupyterhub_message = message
        self.message = message

    def __str__(self) -> str:
        return self.message


class _Redirect(Exception):
    """The pod must move: raised inside the start loop, never outside it."""


class GPUBurstSpawner(KubeSpawner, GPUBurstSettings):
    """KubeSpawner that checks live GPU capacity at spawn time and bursts to Liqo donors."""

    _offloaders: dict[int, NamespaceOffloader] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gb_tracker: CapacityTracker | None = None
        self._gb_reset()
        self._gb_state: dict[str, Any] = {}
        # the options the hub database held when this spawner was made: the last accepted set
        self._gb_saved_options = copy.deepcopy(dict(self.user_options or {}))
        # True until this process starts the server itself: a pod found meanwhile was started
        # by a hub process that is gone (see poll)
        self._gb_inherited = True
        self._gb_install_retry(getattr(self, "api", None))

    def _gb_install_retry(self, api: Any) -> None:
        """Transient API failures are retried for every call through KubeSpawner's client."""
        api_client = getattr(api, "api_client", None)
        if getattr(api_client, "rest_client", None) is not None:
            retry.install(api_client, logger=self.log)

    def _gb_reset(self) -> None:
        self._gb_placement: Placement | None = None
        self._gb_profile: dict[str, Any] | None = None
        self._gb_attempts: list[dict[str, Any]] = []
        self._gb_messages: list[dict[str, Any]] = []
        self._gb_decided = asyncio.Event()
        self._gb_dead_uids: set[str] = set()
        self._gb_new_events = watch.NewEvents()
        self._gb_donor_refusals = DonorRefusals()
        self._gb_redirect_t0: float | None = None
        self._gb_cpu_only = False
        self.gpuburst_redirect_seconds: list[float] = []
        self._gb_claims: list[storage.Claim] = []
        self._gb_storage: storage.Outcome | None = None
        # the home volume claim this spawn created (not found), until a pod is placed
        self._gb_made_claim: str | None = None
        # this start was cancelled (the student's Cancel, JupyterHub's timeout): see ``ready``
        self._gb_cancelled = False

    # ---- configuration defaults --------------------------------------------------------------
    @default("profile_form_template")
    def _gb_form_template_default(self) -> str:
        return (TEMPLATES / "gpuburst_form.html").read_text()

    @default("options_form")
    def _gb_options_form_default(self) -> Any:
        if not self.profile_list:
            return ""
        # always rendered per request: availability changes from one minute to the next
        return self._gb_render_form

    # ---- shared state ------------------------------------------------------------------------
    @property
    def gpuburst_key(self) -> str:
        return server_key(self.user.name, self.name)

    async def gpuburst_tracker(self) -> CapacityTracker:
        if self._gb_tracker is None:
            self._gb_tracker = await CapacityTracker.ensure(self.config, self.log, namespace=self.namespace)
        return self._gb_tracker

    def _offloader(self) -> NamespaceOffloader:
        loop_key = id(asyncio.get_running_loop())
        offloader = self._offloaders.get(loop_key)
        if offloader is None:
            from kubespawner.clients import shared_client

            offloader = NamespaceOffloader(shared_client("CustomObjectsApi"), self.log)
            self._offloaders[loop_key] = offloader
        return offloader

    # ---- profiles and user_options -----------------------------------------------------------
    async def _gb_profile_list(self) -> list[dict[str, Any]]:
        profile_list = self._sorted_dict_values(self.profile_list)
        if callable(profile_list):
            profile_list = await maybe_future(profile_list(self))
        try:
            profile_policy.check_profiles(profile_list or [])
        except profile_policy.ProfilePolicyError as exc:
            self.log.error("%s", exc)
            raise SpawnRefused(500, "The hub's profiles are misconfigured; please tell the hub's admins.") from None
        return self._get_initialized_profile_list(profile_list or [])

    async def _gb_validate_options(self) -> list[dict[str, Any]]:
        profile_list = await self._gb_profile_list()
        validate_user_options(self.user_options, profile_list, log=self.log)
        return profile_list

    async def _run_apply_user_options(self, user_options: Any) -> Any:
        # JupyterHub turns errors here into 400 before start(), so nothing is created
        try:
            validate_user_options(user_options, await self._gb_profile_list(), log=self.log)
        except UserOptionsError:
            self._gb_restore_options()
            raise
        # without an admin's apply_user_options hook JupyterHub would log the profile as
        # "unhandled"; KubeSpawner applies it at start (load_user_options), as it always has
        parent = getattr(super(), "_run_apply_user_options", None)
        result = await parent(user_options) if parent is not None and self.apply_user_options else None
        self._gb_saved_options = copy.deepcopy(dict(user_options or {}))
        return result

    def _gb_restore_options(self) -> None:
        """JupyterHub saved the refused options before asking us: put the accepted ones back."""
        spawnstate.restore_options(self, self._gb_saved_options)

    async def load_user_options(self) -> None:
        profile_list = await self._gb_validate_options()
        await super().load_user_options()
        self._gb_profile = None
        if profile_list:
            self._gb_profile = self._get_profile((self.user_options or {}).get("profile"), profile_list)
        block = self._gb_block(self._gb_profile)
        if block is not None:
            count = str(block.count)
            self.extra_resource_limits = {**self.extra_resource_limits, block.resource: count}
            self.extra_resource_guarantees = {**self.extra_resource_guarantees, block.resource: count}

    def _gb_block(self, profile: dict[str, Any] | None) -> ProfileGPU | None:
        try:
            return profile_block(profile)
        except ValueError as exc:
            raise SpawnRefused(400, str(exc)) from None

    def _gb_tracks(self, resource: str) -> bool:
        return resource in self.gpu_resource_names or resource.startswith(tuple(self.gpu_resource_prefixes))

    def gpu_request(self, pod: Any = None) -> GPURequest | None:
        """The whole-pod request of ``pod`` (a built manifest), or None for a CPU-only server.

        Without ``pod``, the request of the pod the current traits would build.
        """
        if pod is not None:
            spec = self._gb_serialize(pod).get("spec") or {}
        else:
            spec = pod_spec_from_traits({name: getattr(self, name, None) for name in RESOURCE_TRAITS})
        try:
            demand = request_of_pod(spec, self._gb_tracks)
        except ValueError as exc:
            raise SpawnRefused(400, str(exc)) from None
        if demand is None:
            return None
        block = self._gb_block(self._gb_profile)
        groups = frozenset(getattr(g, "name", str(g)) for g in (getattr(self.user, "groups", None) or []))
        return GPURequest(
            resource=demand.resource,
            count=demand.count,
            user=self.user.name,
            groups=groups,
            profile=(self._gb_profile or {}).get("slug", ""),
            allowed_sites=block.allowed_sites if block else None,
            resources=demand.resources,
            images=images.pod_images(spec),
        )

    # ---- the decision ------------------------------------------------------------------------
    def _gb_message(self, message: str, kind: str = "info") -> None:
        """Say ``message`` on the spawn page; headline kinds stay pinned (see spawn_messages)."""
        self._gb_messages.append(spawn_messages.message(message, kind))
        self.log.info("%s: %s", self._log_name, message)

    async def _gb_decide(self, request: GPURequest) -> Placement:
        tracker = await self.gpuburst_tracker()
        key = self.gpuburst_key
        tried = [a["site"] for a in self._gb_attempts]
        if not tried:
            # before any placement: a student whose GPU-hours are used up holds nothing
            refusal = budget_refusal(tracker, request.user, request.groups, bool(getattr(self.user, "admin", False)))
            if refusal:
                metrics.record_spawn("none", "failure")
                raise SpawnRefused(403, refusal)
        if tried:
            sites = request.allowed_sites if request.allowed_sites is not None else tuple(tracker.snapshot().sites)
            request = replace(request, allowed_sites=tuple(s for s in sites if s not in tried))
        outcome = self._gb_place(tracker, key, request)
        if isinstance(outcome, NoCapacity) and not tried and self.queue_when_full:
            outcome = await self._gb_wait_in_queue(tracker, key, request)
        if isinstance(outcome, NoCapacity):
            metrics.record_spawn("none", "no_capacity")
            if tried:
                raise SpawnRefused(503, f"{self._gb_tried_summary()} No other site can take it: {outcome.reason}")
            raise SpawnRefused(503, outcome.reason)
        if tried:
            metrics.record_redirect(tried[-1], outcome.site)
            outcome = replace(outcome, reason=self._gb_redirect_reason(tracker, outcome, tried[-1]))
            self._gb_message(outcome.reason, "redirect")
        else:
            self._gb_message(outcome.reason, "decision")
        tracker.note_decision(key, outcome, len(self._gb_attempts) + 1)
        return outcome

    def _gb_note_ready(self, groups: frozenset[str], asked: float) -> None:
        """Note a class student's server ready for the lab's report once the student can reach it.

        start() returns when the pod runs, before the server in it answers: the hub then waits
        up to http_timeout for it and adds its route, and only then clears the spawn's pending
        flag, in a callback of the spawn's future. A callback added now runs after that one.
        """

        def ready(_future: Any) -> None:
            if self.ready:  # not when the server never answered, or its route failed
                lab_classes.note_start(self.user.name, groups, asked, time.time())

        future = getattr(self, "_spawn_future", None)
        if future is None or future.done():  # started other than by the hub's spawn handler
            lab_classes.note_start(self.user.name, groups, asked, time.time())
        else:
            future.add_done_callback(ready)

    @staticmethod
    def _gb_redirect_reason(tracker: CapacityTracker, outcome: Placement, previous: str) -> str:
        site = tracker.snapshot().site(outcome.site)
        totals = site.total(outcome.resource) if site else None
        total = totals.allocatable if totals else 0
        # free as the decision saw it: the snapshot already counts this spawn's own hold
        free = (totals.free if totals else 0) + outcome.count
        where = outcome.site if outcome.is_donor else f"the origin (node {outcome.node})"
        return (
            f"Redirected: {names.site_name(previous)} could not schedule the server after all; "
            f"starting on {where} ({free} of {total} {names.gpu_units(outcome.resource, total)} free)."
        )

    def _gb_place(self, tracker: CapacityTracker, key: str, request: GPURequest) -> Placement | NoCapacity:
        started = time.perf_counter()
        try:
            # GPUs booked for a lab on now are not this request's to take unless it is in the class
            held = lab_classes.refusal_on(request, tracker.snapshot)
            if held is not None:
                return held
            return tracker.placer.place(key, request, time.monotonic(), self._gb_policy(tracker))
        except PlacementInputError as exc:
            raise SpawnRefused(400, str(exc)) from None
        finally:
            metrics.observe_decision(time.perf_counter() - started)

    async def _gb_wait_in_queue(self, tracker: CapacityTracker, key: str, request: GPURequest) -> Placement | NoCapacity:
        """Wait first-come-first-served until a site has room, at most ``start_timeout``; the
        spawn page's headline says the place in line and the expected wait as they change."""
        return await queue_wait.wait_in_line(
            tracker,
            key,
            request,
            lambda: self._gb_place(tracker, key, request),
            lambda text, position, wait: self._gb_message(text, "queue"),
            self.start_timeout,
        )

    def _gb_policy(self, tracker: CapacityTracker) -> Any:
        """This spawn's Policy when its profile overrides Policy traits, else None (the hub's)."""
        for trait in profile_policy.HUB_WIDE_TRAITS:
            if getattr(self, trait) != getattr(tracker.settings, trait):
                raise SpawnRefused(500, f"This profile is misconfigured ({trait} is hub-wide); please tell the hub's admins.")
        values = {name: getattr(self, name) for name in profile_policy.POLICY_TRAITS}
        try:
            return profile_policy.policy_for(tracker.settings, values, tracker.placer.policy.known_profiles)
        except (ValueError, TraitError) as exc:
            self.log.error("Profile policy overrides rejected: %s", exc)
            raise SpawnRefused(500, "This profile's placement settings are invalid; please tell the hub's admins.") from None

    def _gb_tried_summary(self) -> str:
        tried = "; ".join(f"{a['site']} ({a['outcome']})" for a in self._gb_attempts)
        return f"Tried {len(self._gb_attempts)} site(s): {tried}."

    # ---- the pod -----------------------------------------------------------------------------
    async def get_pod_manifest(self) -> Any:
        # built first and placed as built: what is placed is exactly what is created
        self._gb_placement = None
        pod = await super().get_pod_manifest()
        # the release that made it, for `gpuburst doctor` after an upgrade
        pod.metadata.labels = {**(pod.metadata.labels or {}), keys.VERSION_LABEL: release.label_value(__version__)}
        request = self.gpu_request(pod)
        if request is None:
            self._gb_cpu_only = True
            self._gb_message(cpu_servers.REASON, "decision")
            self._gb_pin_cpu_only(pod)
            return pod
        self._gb_cpu_only = False
        request, constraint = await self._gb_storage_constrain(request)
        try:
            placement = await self._gb_decide(request)
        except SpawnRefused as exc:
            raise SpawnRefused(exc.status_code, f"{exc.message} ({constraint.reason})") if constraint.reason else exc from None
        self._gb_placement = placement
        self._gb_storage_decide(placement, constraint)
        # in the hub database before the pod exists: a hub killed from here on restarts knowing
        # where this server was sent (one commit for all the spawns deciding at this moment)
        await spawnstate.save_state_together(self)
        if placement.is_donor and self.offload_namespace:
            try:
                await self._offloader().ensure(self.namespace)
            except Exception as exc:  # noqa: BLE001 - any failure frees the reservation, then is re-raised
                (await self.gpuburst_tracker()).forget_decision(self.gpuburst_key)
                raise self._gb_public_error(exc, f"offloading namespace {self.namespace} for donor {placement.site}") from None
        self._gb_pin(pod, placement)
        self._gb_skip_old_events()
        if self._gb_storage is not None and self._gb_storage.scratch_claims:
            volumes = storage.scratch_volumes(pod.spec.volumes, self._gb_storage.scratch_claims, self._gb_serialize)
            pod.spec.volumes = [get_k8s_model(V1Volume, v) for v in volumes]
        self._gb_decided.set()
        return pod

    # ---- storage (rules in hub/sites/storage.py) ----------------------------------------------------
    async def _gb_storage_constrain(self, request: GPURequest) -> tuple[GPURequest, storage.Constraint]:
        """Narrow the request to the sites the user's volumes allow under ``storage_policy``."""
        names = storage.claim_names(self._gb_serialize(v) if not isinstance(v, dict) else v for v in self._expand_all(self.volumes))
        self._gb_claims = await storage.read_claims(self.api, self.namespace, names, self.storage_class or None) if names else []
        await self.gpuburst_tracker()  # node -> site comes from its snapshot
        constraint = storage.constrain(self.storage_policy, self._gb_claims, self._gb_site_of_node)
        if constraint.allowed_sites is None:
            return request, constraint
        return replace(request, allowed_sites=storage.combine(request.allowed_sites, constraint)), constraint

    def _gb_storage_decide(self, placement: Placement, constraint: storage.Constraint) -> None:
        self._gb_storage = storage.outcome(self.storage_policy, self._gb_claims, placement.site, self._gb_site_of_node)
        if constraint.reason:
            self._gb_message(f"Storage: {constraint.reason[0].upper()}{constraint.reason[1:]}.")
        if self._gb_storage.kind is storage.StorageKind.SCRATCH:
            self._gb_message(self._gb_storage.message)

    def _gb_site_of_node(self, name: str) -> str | None:
        tracker = self._gb_tracker
        node = tracker.snapshot().nodes.get(name) if tracker is not None else None
        return getattr(node, "site", None)

    def _gb_pin(self, pod: Any, placement: Placement) -> None:
        """Pin ``pod`` to the placement: labels, annotations, node affinity, toleration."""
        meta = pod.metadata
        meta.labels = {**(meta.labels or {}), **placement.labels()}
        groups = sorted(getattr(g, "name", str(g)) for g in (getattr(self.user, "groups", None) or []))
        meta.annotations = {
            **(meta.annotations or {}),
            keys.REASON_ANNOTATION: placement.reason,
            keys.USER_ANNOTATION: self.user.name,
            keys.GROUPS_ANNOTATION: json.dumps(groups),
            keys.ATTEMPTS_ANNOTATION: str(len(self._gb_attempts) + 1),
            # GPU-hours are reported per profile (hub.accounting)
            keys.PROFILE_ANNOTATION: (self._gb_profile or {}).get("slug", ""),
        }
        ours = placement.node_affinity()["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        self._gb_narrow_affinity(pod.spec, ours)
        spec = pod.spec
        spec.tolerations = list(spec.tolerations or []) + [get_k8s_model(V1Toleration, t) for t in placement.tolerations()]
        # the placement reaches the server through its env (the pod was built before the decision)
        self._gb_set_env(spec, self._gb_env(placement))

    def _gb_narrow_affinity(self, spec: Any, ours: dict[str, Any]) -> None:
        """Add the node selector term ``ours`` to the pod's required node affinity."""
        affinity = spec.affinity or V1Affinity()
        node_affinity = affinity.node_affinity or V1NodeAffinity()
        required = node_affinity.required_during_scheduling_ignored_during_execution
        if required is None or not required.node_selector_terms:
            terms = [ours]
        else:
            # terms are ORed by Kubernetes: add ours to every admin term so each one is narrowed
            terms = []
            for term in required.node_selector_terms:
                raw = self._gb_serialize(term)
                raw["matchExpressions"] = list(raw.get("matchExpressions") or []) + ours.get("matchExpressions", [])
                if ours.get("matchFields"):
                    raw["matchFields"] = list(raw.get("matchFields") or []) + ours["matchFields"]
                terms.append(raw)
        node_affinity = get_k8s_model(
            V1NodeAffinity,
            {
                **self._gb_serialize(node_affinity),
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            },
        )
        affinity.node_affinity = node_affinity
        spec.affinity = affinity

    def _gb_set_env(self, spec: Any, ours: dict[str, Any]) -> None:
        notebook = spec.containers[0]
        kept = [e for e in (notebook.env or []) if getattr(e, "name", None) not in ours]
        notebook.env = kept + [get_k8s_model(V1EnvVar, {"name": k, **_env_value(v)}) for k, v in ours.items()]

    def _gb_env(self, placement: Placement) -> dict[str, Any]:
        storage_env = self._gb_storage.env() if self._gb_storage is not None else {}
        return {**placement_env(placement), **storage_env}

    def _gb_pin_cpu_only(self, pod: Any) -> None:
        """A server without a GPU stays on the origin's own nodes (see cpu_servers)."""
        # no site label: that label marks the pods whose GPUs the capacity tracker accounts for
        meta = pod.metadata
        meta.annotations = {**(meta.annotations or {}), keys.REASON_ANNOTATION: cpu_servers.REASON}
        self._gb_narrow_affinity(pod.spec, cpu_servers.node_selector_term())
        self._gb_set_env(pod.spec, cpu_servers.env())

    def _gb_kernel_env(self) -> dict[str, str]:
        """Where the server finds the GPU kernel and activity APIs (the gpuburst service),
        whatever its profile."""
        return service_env()

    def _gb_serialize(self, model: Any) -> dict[str, Any]:
        return self.api.api_client.sanitize_for_serialization(model) or {}

    def get_env(self) -> dict[str, Any]:
        env = super().get_env()
        env.update(self._gb_kernel_env())
        if self._gb_placement is not None:
            env.update(self._gb_env(self._gb_placement))
        elif self._gb_cpu_only:
            env.update(cpu_servers.env())
        return env

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        created = await super()._make_create_pod_request(pod, request_timeout)
        if created and self._gb_redirect_t0 is not None:
            self.gpuburst_redirect_seconds.append(time.monotonic() - self._gb_redirect_t0)
            self._gb_redirect_t0 = None
        return created

    async def _make_create_pvc_request(self, pvc: Any, request_timeout: float) -> bool:
        # KubeSpawner answers True whether it made the claim or found it: ask first, so that a
        # spawn that never starts a server deletes only a claim it made itself (nothing in it)
        name = pvc.metadata.name
        existed = await self._check_pvc_exists(name, self.namespace)
        created = await super()._make_create_pvc_request(pvc, request_timeout)
        if created and not existed:
            self._gb_made_claim = name
        return created

    async def _gb_drop_unused_claim(self) -> None:
        """Delete the home volume this spawn made when no pod of it was ever placed (cancelled in
        the queue, timed out, refused): a student who gave up leaves nothing behind."""
        name, self._gb_made_claim = self._gb_made_claim, None
        if name is None or self._gb_placement is not None:
            return
        try:
            await self.api.delete_namespaced_persistent_volume_claim(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                self.log.warning("%s: could not delete the unused volume claim %s: %s", self._log_name, name, retry.describe(exc))
                return
        self._pvc_exists = False
        self.log.info("%s: deleted volume claim %s, made for a start that never placed a server", self._log_name, name)

    # ---- start, redirect, stop ---------------------------------------------------------------
    async def _start(self) -> Any:
        self._gb_inherited = False
        self._gb_reset()
        self._gb_state = {}  # a new start replaces whatever placement was restored
        # also checked before start() by _run_apply_user_options; kept here for hubs without it
        await self._gb_validate_options()
        # a lab's report reads how long its students waited from Start to a ready server
        groups = frozenset(getattr(g, "name", str(g)) for g in (getattr(self.user, "groups", None) or []))
        asked = time.time()
        lab_classes.note_start(self.user.name, groups, asked)
        try:
            while True:
                start_task = asyncio.ensure_future(super()._start())
                monitor = asyncio.ensure_future(self._gb_watch_pod())
                try:
                    await asyncio.wait({start_task, monitor}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (start_task, monitor):
                        if not task.done():
                            task.cancel()
                if not monitor.done() or monitor.cancelled() or start_task.done():
                    await asyncio.gather(monitor, return_exceptions=True)
                    url = await start_task
                    if self._gb_placement is not None:
                        metrics.record_spawn(self._gb_placement.site, "success")
                    self._gb_note_ready(groups, asked)
                    return url
                why = monitor.result()
                await asyncio.gather(start_task, return_exceptions=True)
                await self._gb_redirect(why)
        except asyncio.CancelledError:
            self._gb_cancelled = True
            metrics.record_spawn(self._gb_site(), "cancelled")
            await self._gb_forget()
            await self._gb_drop_unused_claim()
            # JupyterHub stops a cancelled server only if its poll finds the pod; a create that
            # landed while the watch was away (API server down) would be left holding a GPU
            self._gb_sweep_late_pod()
            raise
        except Exception as exc:
            if self._gb_placement is not None:
                metrics.record_spawn(self._gb_placement.site, "failure")
            await self._gb_forget()
            await self._gb_drop_unused_claim()
            if isinstance(exc, UserOptionsError) or (isinstance(exc, SpawnRefused) and exc.status_code == 400):
                self._gb_restore_options()
            if isinstance(exc, web.HTTPError):
                raise
            refused = self._gb_public_error(exc, "starting the server")
            if isinstance(refused, SpawnRefused) and refused.status_code == 503:
                self._gb_sweep_late_pod()
            raise refused from None

    def _gb_sweep_late_pod(self) -> None:
        """After a spawn that timed out or was cancelled, delete its pod should it show up."""
        if self._gb_tracker is None:
            return
        failed = self._start_future

        def unwanted() -> bool:
            # until this server is started again (JupyterHub's own cleanup may delete it too)
            return self._start_future is failed

        async def delete() -> None:
            self.log.warning("%s: pod %s exists for a spawn that failed or was cancelled; deleting it", self._log_name, self.pod_name)
            await self.stop(now=True)

        self._gb_sweeper = asyncio.ensure_future(
            spawnstate.delete_if_it_appears(self._gb_tracker, self.namespace, self.pod_name, unwanted, delete)
        )

    def _gb_public_error(self, exc: BaseException, doing: str) -> BaseException:
        """The one sentence a student sees for ``exc``; the detail goes to the log only."""
        if isinstance(exc, OffloadingPermissionError):
            self.log.error("%s: %s failed: %s", self._log_name, doing, exc)
            return SpawnRefused(503, "GPUs on donor clusters cannot be used now; an administrator has been told.")
        failure = retry.public_failure(exc)
        if failure is None:
            # not the API server: a bug or an unexpected object; the traceback is for the log
            self.log.error("%s: %s failed", self._log_name, doing, exc_info=exc)
            return SpawnRefused(500, retry.ADMIN_MESSAGE)
        status, message, level = failure
        self.log.log(level, "%s: %s failed: %s", self._log_name, doing, retry.describe(exc))
        return SpawnRefused(status, message)

    def _gb_site(self) -> str:
        return self._gb_placement.site if self._gb_placement is not None else "none"

    async def _gb_forget(self) -> None:
        if self._gb_tracker is not None:
            self._gb_tracker.forget_decision(self.gpuburst_key)
            self._gb_tracker.dequeue(self.gpuburst_key)

    async def _gb_redirect(self, why: str) -> None:
        placement = self._gb_placement
        assert placement is not None
        self._gb_redirect_t0 = self._gb_redirect_t0 or time.monotonic()
        self._gb_attempts.append({"site": placement.site, "cluster_id": placement.cluster_id, "outcome": why})
        tracker = await self.gpuburst_tracker()
        pod = tracker.pod(self.namespace, self.pod_name)
        if pod is not None and (pod.get("metadata") or {}).get("uid"):
            self._gb_dead_uids.add(pod["metadata"]["uid"])
        self._gb_message(f"Could not start on {names.site_name(placement.site)}: {why}", "redirect")
        await self.stop(now=True)
        tracker.forget_decision(self.gpuburst_key)
        self._gb_placement = None
        spawnstate.save_state(self)  # the old pod is gone: no placement until the next decision
        if len(self._gb_attempts) > self.max_redirects:
            raise SpawnRefused(503, f"{self._gb_tried_summary()} Gave up after {self.max_redirects} redirect(s).")
        self._gb_decided = asyncio.Event()
        self._gb_placement = None

    async def _gb_watch_pod(self) -> str:
        """Return why this attempt's pod must move; runs until cancelled otherwise."""
        await self._gb_decided.wait()
        placement = self._gb_placement
        assert placement is not None
        tracker = await self.gpuburst_tracker()
        pending_since: float | None = None
        while True:
            pod = tracker.pod(self.namespace, self.pod_name)
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            if pod is not None and uid not in self._gb_dead_uids:
                phase = (pod.get("status") or {}).get("phase")
                why = unschedulable_reason(pod, placement.resource)
                if why is None and placement.is_donor and phase == "Pending":
                    # a donor's own scheduler failing shows only as events about this pod; the
                    # event list is scanned for pending donor pods only, so 200 spawns stay cheap
                    why = self._gb_failed_scheduling_event(pod, uid, placement.resource)
                if why is not None:
                    self._gb_redirect_t0 = time.monotonic()
                    return why
                # a pod the donor's kubelet is starting (pulling its image) has its room; one the
                # origin has not bound to the donor's virtual node yet (it waits there for the
                # placeholders it preempts to go) is not the donor's to place
                bound = bool((pod.get("spec") or {}).get("nodeName"))
                if placement.is_donor and phase == "Pending" and bound and not started_on_donor(pod):
                    pending_since = pending_since or time.monotonic()
                    waited = time.monotonic() - pending_since
                    if waited >= self.donor_pending_grace_seconds:
                        self._gb_redirect_t0 = time.monotonic()
                        return f"still pending on donor {placement.site} after {waited:.0f} s"
                else:
                    pending_since = None
            await tracker.wait_pod_change(self.namespace, self.pod_name, 0.5)

    def _gb_skip_old_events(self) -> None:
        # the pod is about to be made: no event received so far is about it
        reflector = self.event_reflector if self.events_enabled else None
        if reflector is not None:
            self._gb_new_events.skip_to_end(reflector.resources)
        self._gb_donor_refusals.forget()

    def _gb_failed_scheduling_event(self, pod: dict[str, Any], uid: str | None, resource: str) -> str | None:
        # only the events that arrived since the last look (watch.NewEvents says why)
        reflector = self.event_reflector if self.events_enabled else None
        if reflector is None:
            return None
        fresh = self._gb_new_events.read(reflector.resources)
        return self._gb_donor_refusals.reason(fresh, pod, uid, resource)

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        # KubeSpawner stops a same-named pod inside start (a create retried after a timeout
        # finds the first one): the spawn goes on, and so must its reservation
        starting = self._start_future is not None and not self._start_future.done()
        if self._gb_tracker is not None and not starting:
            self._gb_tracker.forget_decision(self.gpuburst_key)
        await self._gb_stop_kernels()

    async def _gb_stop_kernels(self) -> None:
        """The server's GPU kernels stop with it (their pods are also owned by its pod)."""
        try:
            await stop_server_kernels(self)
        except Exception:  # noqa: BLE001 - garbage collection and the reaper still remove them
            self.log.exception("Could not stop the GPU kernels of %s", self._log_name)

    async def _start_reflector(self, kind: str, reflector_class: Any, replace: bool = False, **kwargs: Any) -> Any:
        """KubeSpawner's shared reflector, started again when its first list had failed, and
        waited for so that one cancelled spawn does not fail every other.

        KubeSpawner keeps a reflector whose first list failed (the API server away longer than
        the client's retries) and hands it to every later spawn, which then fails on its first
        load for as long as the hub runs. A failed one is replaced instead.

        KubeSpawner also awaits the reflector's shared ``first_load_future`` directly, and a task
        cancelled while awaiting a future cancels that future. A student who pressed Cancel while
        the first list was under way (a hub just restarted, the API server slow) thus cancelled
        it for every spawn waiting on it: each of them failed with a bare "Internal Server
        Error". The wait runs in a task of its own, behind a shield: a cancel ends only the wait.
        """
        previous = self.__class__.reflectors.get(self._get_reflector_key(kind))
        loaded = getattr(previous, "first_load_future", None)
        if not replace and loaded is not None and loaded.done() and (loaded.cancelled() or loaded.exception() is not None):
            self.log.warning("The %s reflector's first list had failed; starting it again", kind)
            replace = True
        if not replace and loaded is not None and loaded.done():
            return await super()._start_reflector(kind, reflector_class, **kwargs)  # loaded: no wait
        starting = asyncio.ensure_future(super()._start_reflector(kind, reflector_class, replace=replace, **kwargs))
        # a failure nobody waits for any more (the spawn that started it was cancelled) is not
        # "never retrieved": the next spawn sees it on the reflector and starts a new one
        starting.add_done_callback(lambda task: task.cancelled() or task.exception())
        return await asyncio.shield(starting)

    @property
    def ready(self) -> bool:
        """JupyterHub's test, but a cancelled start is never ready.

        JupyterHub cancels a pending start (DELETE of the server) and stops the server a second
        later; in between, the server still has its address, so JupyterHub's progress stream
        told the spawn page "Server ready" and the page went to a server that never started.
        """
        return not self._gb_cancelled and super().ready

    def is_pod_running(self, pod: Any) -> bool:
        """KubeSpawner's test, without a KeyError for a status field the API server omitted.

        KubeSpawner indexes ``status.podIP`` and ``status.containerStatuses``; a pod whose
        status lacks one (in transition) made both the spawn and JupyterHub's cleanup after it
        fail, leaving the pod behind with no server in the hub.
        """
        if pod is None:
            return False
        status = pod.get("status") or {}
        containers = status.get("containerStatuses")
        return (
            status.get("phase") == "Running"
            and status.get("podIP") is not None
            and "deletionTimestamp" not in (pod.get("metadata") or {})
            and containers is not None
            and all(c.get("ready") for c in containers)
        )

    async def poll(self) -> int | None:
        """KubeSpawner's poll, plus what a hub restart in the middle of a spawn needs.

        A pod found still starting by a hub process that did not start it belongs to a spawn
        the previous process never finished: nobody waits for it, and JupyterHub would route to
        an address it never learned. It is deleted, so the student's next start makes one pod
        again, and the server counts as stopped. A running pod is adopted, with the placement
        its own labels show.
        """
        status = await super().poll()
        if status is not None or not self._gb_inherited:
            return status
        pod = self.pod_reflector.pods.get(f"{self.namespace}/{self.pod_name}")
        if pod is None:
            return status
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or not self.is_pod_running(pod):
            self.log.warning("%s: pod %s was left starting by an earlier hub process; deleting it", self._log_name, self.pod_name)
            await self.stop(now=True)
            self.clear_state()
            spawnstate.save_state(self)
            return 1
        placement = spawnstate.reconcile(self._gb_state, pod)
        if placement is not None and placement != self._gb_state:
            if self._gb_state:
                self.log.warning("%s: placement in hub state corrected from the pod's labels", self._log_name)
            self._gb_state = placement
            spawnstate.save_state(self)
        self._gb_inherited = False
        return status

    # ---- progress ----------------------------------------------------------------------------
    async def progress(self) -> Any:
        """The decision and its reason, redirects, then KubeSpawner's usual pod events."""
        sent = 0
        events = super().progress().__aiter__()
        pending: asyncio.Future | None = None
        events_done = False
        try:
            while True:
                while sent < len(self._gb_messages):
                    yield {"progress": min(5 + 5 * sent, 30), **self._gb_messages[sent]}
                    sent += 1
                start_future = self._start_future
                if events_done:
                    if start_future is None or start_future.done():
                        break
                    await asyncio.sleep(0.2)
                    continue
                if pending is None:
                    pending = asyncio.ensure_future(events.__anext__())
                done, _ = await asyncio.wait({pending}, timeout=0.2)
                if pending in done:
                    try:
                        item = pending.result()
                    except StopAsyncIteration:
                        events_done = True
                    else:
                        if not spawn_messages.is_runtime_noise(item):
                            yield spawn_messages.pod_event(item)
                    pending = None
            while sent < len(self._gb_messages):
                yield self._gb_messages[sent]
                sent += 1
        finally:
            # KubeSpawner's generator must not be closed while a step of it still runs
            # ("aclose(): asynchronous generator is already running" when a client leaves)
            if pending is not None and not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
            await events.aclose()

    # ---- state -------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self._gb_placement is not None:
            state["gpuburst"] = {**self._gb_placement.as_dict(), "attempts": len(self._gb_attempts) + 1}
            if self._gb_storage is not None:
                state["gpuburst"]["storage"] = self._gb_storage.as_dict()
        elif self._gb_state:
            state["gpuburst"] = dict(self._gb_state)
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        saved = state.get("gpuburst") if isinstance(state, dict) else None
        self._gb_state = dict(saved) if isinstance(saved, dict) else {}

    def clear_state(self) -> None:
        super().clear_state()
        self._gb_state = {}
        self._gb_placement = None

    @property
    def gpuburst_placement(self) -> dict[str, Any] | None:
        """Where this server runs (restored from state after a hub restart)."""
        if self._gb_placement is not None:
            return {**self._gb_placement.as_dict(), "attempts": len(self._gb_attempts) + 1}
        return dict(self._gb_state) or None

    # ---- the form ----------------------------------------------------------------------------
    async def _gb_render_form(self, spawner: Any = None) -> str:
        profile_list = await self._gb_profile_list()
        try:
            tracker = await self.gpuburst_tracker()
        except Exception as exc:  # noqa: BLE001 - the form must still render when the API server is away
            self.log.warning("No live GPU capacity for the spawn form: %s", exc)
            tracker = None
        annotated = [self._gb_annotate(p, tracker) for p in profile_list]
        form = self._render_options_form(annotated)
        form = self._gb_right_size_note(profile_list, tracker) + form
        groups = [getattr(g, "name", str(g)) for g in (getattr(self.user, "groups", None) or [])]
        note = budget_note(tracker, self.user.name, groups, bool(getattr(self.user, "admin", False)))
        if not note:
            return form
        # the form is a template JupyterHub renders again: no braces of ours may reach it
        text = html.escape(note).replace("{", "&#123;").replace("}", "&#125;")
        return f'<p class="gpuburst-budget" id="gpuburst-budget">{text}</p>\n{form}'

    def _gb_right_size_note(self, profile_list: list[dict[str, Any]], tracker: CapacityTracker | None) -> str:
        """The smallest GPU profile the user's past sessions would have fitted, above the profiles."""
        text = suggestion_for(tracker, self.user.name, spawn_form.offers(profile_list, self.config, self._gb_tracks))
        if not text:
            return ""
        # the form is a template JupyterHub renders again: no braces of ours may reach it
        text = html.escape(text).replace("{", "&#123;").replace("}", "&#125;")
        return f'<p class="gpuburst-right-size" id="gpuburst-right-size">{text}</p>\n'

    def _gb_annotate(self, profile: dict[str, Any], tracker: CapacityTracker | None) -> dict[str, Any]:
        # the configured base, not this spawner's traits: a refused profile's override stays on them
        base = spawn_form.configured_resources(self.config)
        policy = None
        if tracker is not None:
            try:
                policy = profile_policy.policy_for(
                    tracker.settings, profile.get("kubespawner_override") or {}, tracker.placer.policy.known_profiles
                )
            except (ValueError, TraitError) as exc:
                return {**profile, "gpuburst_status": {"full": True, "never": True, "summary": f"Misconfigured: {exc}"}}
        # a profile may turn the queue on or off for itself, like any spawner trait
        queues = bool((profile.get("kubespawner_override") or {}).get("queue_when_full", self.queue_when_full))
        return spawn_form.annotate(profile, base, self._gb_tracks, self.user, tracker, policy, queues)


def placement_env(placement: Placement) -> dict[str, Any]:
    """The env vars that tell the server where it runs and why."""
    return {
        keys.SITE_ENV: placement.site,
        keys.CLUSTER_ENV: placement.cluster_id or "",
        keys.REASON_ENV: placement.reason,
        keys.GPU_RESOURCE_ENV: placement.resource,
        keys.GPU_COUNT_ENV: str(placement.count),
        keys.NODE_ENV: {"valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    }


def _env_value(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {"value": str(value)}
