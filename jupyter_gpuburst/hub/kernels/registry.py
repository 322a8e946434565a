"""The hub's GPU kernels: place each one from the spawner's ledger, run its pod, stop and reap it.

One registry per ``CapacityTracker``, so servers and kernels share one inventory and one set of
reservations: a GPU promised to a spawning server is never offered to a kernel, and the other
way round. Pods are the truth: a record lost in a hub restart is rebuilt from its pod.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes_asyncio.client import ApiException, NetworkingV1Api

from jupyter_gpuburst.core import images, keys, reasons
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, PlacementInputError
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels import ingress, leftovers, manifests, prestarted, queued
from jupyter_gpuburst.hub.kernels.availability import availability
from jupyter_gpuburst.hub.kernels.donorspace import DonorNamespaces, server_namespace
from jupyter_gpuburst.hub.kernels.files import KernelFilesRequest, clean_notebook_dir, decide_files
from jupyter_gpuburst.hub.kernels.podstate import exit_message, ready, where
from jupyter_gpuburst.hub.kernels.records import KernelError, KernelRecord, Refused, record_from_pod
from jupyter_gpuburst.hub.kernels.settings import PORT_SETS, GPUKernelSettings, KernelProfile
from jupyter_gpuburst.hub.queue import classes as lab_classes
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader
from jupyter_gpuburst.hub.sites.unschedulable import started_on_donor, unschedulable_reason

POD_PREFIX = "gpuburst-kernel-"
SIGNATURE_SCHEMES = frozenset({"hmac-sha256"})
MAX_REDIRECTS = 2
LAST_SITES_KEPT = 10000  # restarts remembered; an old kernel id past it is placed as a new one


class KernelRegistry:
    """GPU kernels of one hub process (one per capacity tracker)."""

    _instances: dict[int, "KernelRegistry"] = {}

    def __init__(
        self,
        tracker: CapacityTracker,
        settings: GPUKernelSettings,
        core_api: Any,
        custom_api: Any,
        image: str,
        namespace: str,
        log: logging.Logger | None = None,
    ) -> None:
        self.tracker = tracker
        self.settings = settings
        self.api = core_api
        # each origin kernel's own NetworkPolicy (hub/kernels/ingress.py), on the same connection
        self.networking = NetworkingV1Api(core_api.api_client) if core_api is not None else None
        self.offloader = NamespaceOffloader(custom_api, log)
        self.donor_namespaces = DonorNamespaces(core_api, self.offloader, log)
        self.image = image
        self.namespace = namespace
        self.log = log or logging.getLogger(__name__)
        self.records: dict[str, KernelRecord] = {}
        self.profiles = settings.kernel_profiles()
        self._reaper: asyncio.Task | None = None
        # (user, server, kernel id) -> the site its last pod was placed on, oldest first
        self._last_sites: dict[tuple[str, str, str], str] = {}
        # (site, profile) with pre-started kernels (c.WarmPools.kernels)
        self.prestarted: set[tuple[str, str]] = set()
        # one start at a time per user, from the limits' check to its record: concurrent starts
        # all passed the check before any of them was recorded
        self._user_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @classmethod
    def for_tracker(cls, tracker: CapacityTracker, factory: Callable[[], "KernelRegistry"]) -> "KernelRegistry":
        registry = cls._instances.get(id(tracker))
        if registry is None or registry.tracker is not tracker:
            registry = cls._instances[id(tracker)] = factory()
        return registry

    # ---- reading ------------------------------------------------------------------------------
    def get(self, user: str, record_id: str) -> KernelRecord:
        """The user's kernel; another user's reads as missing, so ids reveal nothing."""
        self._adopt()
        record = self.records.get(record_id)
        if record is None or record.user != user:
            raise KernelError(404, f"no GPU kernel {record_id!r}")
        return record

    def list(self, user: str, server_name: str | None = None) -> list[KernelRecord]:
        self._adopt()
        return [r for r in self.records.values() if r.user == user and (server_name is None or r.server_name == server_name)]

    def all_records(self) -> list[KernelRecord]:
        """Every kernel of every user, those rebuilt from their pods included (for the culler)."""
        self._adopt()
        return list(self.records.values())

    def state(self, record: KernelRecord) -> str:
        if record.state != "running":
            return record.state
        pod = self.tracker.pod(record.namespace, record.pod_name)
        if pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return "stopped"
        return "running"

    def pod_ip(self, record: KernelRecord) -> str | None:
        pod = self.tracker.pod(record.namespace, record.pod_name) or {}
        return (pod.get("status") or {}).get("podIP")

    def waiting(self, record: KernelRecord) -> str | None:
        """What a starting kernel waits for, in a student's words; None once it runs."""
        if record.state != "pending":
            return None
        if record.line is not None:
            return queued.waiting_text(record.line)
        pod = self.tracker.pod(record.namespace, record.pod_name) or {}
        if not (pod.get("spec") or {}).get("nodeName"):
            return "a GPU"
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            reason = ((status.get("state") or {}).get("waiting") or {}).get("reason") or ""
            if "ImagePull" in reason or reason == "PullingImage":
                return "its image to download"
            if reason:
                return "its container to start"
        return "the kernel to answer"

    def node(self, record: KernelRecord) -> str | None:
        pod = self.tracker.pod(record.namespace, record.pod_name) or {}
        return (pod.get("spec") or {}).get("nodeName") or (record.placement.node if record.placement else None)

    async def wait(self, record: KernelRecord, timeout: float) -> None:
        """Return once ``record`` is no longer pending, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while record.state == "pending" and time.monotonic() < deadline:
            waiter = asyncio.ensure_future(record.changed.wait())
            try:
                await asyncio.wait({waiter}, timeout=deadline - time.monotonic())
            finally:
                waiter.cancel()

    def _adopt(self) -> None:
        """Records for kernel pods this process did not start (a hub restart)."""
        for donor in self.tracker.snapshot().donors():  # the watch follows the donors' kernel namespaces too
            self.tracker.own_namespace(manifests.donor_kernel_namespace(self.namespace, donor.cluster_id))
        for pod in self.tracker.placed_pods():
            meta = pod.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            record_id = annotations.get(keys.KERNEL_ANNOTATION)
            if not record_id or record_id in self.records or "deletionTimestamp" in meta:
                continue
            self.records[record_id] = record_from_pod(pod, record_id, self.profiles, self.tracker.inventory, self.settings.ports())
            if not ready(pod):
                record = self.records[record_id]
                request = GPURequest(
                    record.profile.resource, record.placement.count, record.user, images=images.pod_images(pod.get("spec") or {})
                )
                record.task = asyncio.ensure_future(self._watch_start(record, request))

    def availability(self, profile: KernelProfile, user: str, groups: frozenset[str]) -> dict[str, Any]:
        """How many kernels of ``profile`` could start now for ``user``, per site (no reservation)."""
        request = self._request(profile, user, groups)
        return availability(self.tracker.snapshot(), self.tracker.placer.policy, request)

    # ---- starting -----------------------------------------------------------------------------
    def _request(self, profile: KernelProfile, user: str, groups: frozenset[str]) -> GPURequest:
        pod_images = (images.normalize(profile.pod_image(self.image)),)  # the kernel pod's one container's
        return GPURequest(profile.resource, profile.count, user, groups, profile.slug, profile.allowed_sites, images=pod_images)

    def profile(self, slug: Any) -> KernelProfile:
        if not isinstance(slug, str) or slug not in self.profiles:
            offered = ", ".join(sorted(self.profiles)) or "none"
            raise KernelError(400, f"unknown GPU kernel profile {slug!r}; offered: {offered}")
        return self.profiles[slug]

    async def start(
        self,
        *,
        user: str,
        groups: frozenset[str],
        server_name: str,
        server_pod: dict[str, Any] | None,
        profile_slug: Any,
        key: Any,
        signature_scheme: Any,
        kernel_id: Any,
        notebook_dir: Any,
        port_set: Any = 0,
        refusal: Callable[[], str | None] | None = None,
    ) -> KernelRecord:
        """Place a kernel and create its pod; raises KernelError (503 with the reason when full).

        ``refusal`` says why the user may not start one now (their GPU-hour budget), or None: it
        is asked under the user's lock with the kernel limit, and again when a queued kernel's
        turn comes (Refused)."""
        profile = self.profile(profile_slug)
        if not isinstance(key, str) or not 16 <= len(key) <= 512:
            raise KernelError(400, "the kernel's connection key must be a string of 16 to 512 characters")
        if signature_scheme not in SIGNATURE_SCHEMES:
            raise KernelError(400, f"signature scheme must be one of: {', '.join(sorted(SIGNATURE_SCHEMES))}")
        if not isinstance(kernel_id, str) or len(kernel_id) > 64:
            raise KernelError(400, "kernel_id must be a string of at most 64 characters")
        if type(port_set) is not int or not 0 <= port_set < PORT_SETS:
            raise KernelError(400, f"port_set must be an integer from 0 to {PORT_SETS - 1}")
        lock = self._user_locks.get(user)
        if lock is None:
            lock = self._user_locks[user] = asyncio.Lock()
        async with lock:
            if kernel_id:
                await leftovers.stop_earlier_start(self, user, server_name, kernel_id)
            record = self._accept(user, groups, server_name, server_pod, profile, kernel_id, port_set, refusal)
            request = self._request(profile, user, groups)
            # a restart goes back where this kernel ran, as the hub's own record says: a site the
            # server names (its code can read its token) must never outrank the policy
            ran_on = (user, server_name, kernel_id)
            prefer = self._last_sites.get(ran_on) if kernel_id else None
            await prestarted.claim(self, record, request)  # before its reservation makes the pools make room
            placement = self._place(record, request, prefer)
            if isinstance(placement, NoCapacity):
                if not self.settings.queue_when_full:
                    raise KernelError(503, placement.reason)
                # accepted now, placed when its turn comes: the record says its place in line
                self.records[record.id] = record
                launch = functools.partial(self._launch, record, request, server_pod, key, signature_scheme, notebook_dir)
                record.task = asyncio.ensure_future(queued.start_when_free(self, record, request, prefer, launch, refusal))
                self._ensure_reaper()
                return record
            # recorded before the lock is let go: the next start of this user counts it
            self.records[record.id] = record
        try:
            await self._launch(record, request, server_pod, key, signature_scheme, notebook_dir, placement)
        except KernelError:
            self._forget(record)
            raise
        self._ensure_reaper()
        return record

    def _accept(
        self,
        user: str,
        groups: frozenset[str],
        server_name: str,
        server_pod: dict[str, Any] | None,
        profile: KernelProfile,
        kernel_id: str,
        port_set: int,
        refusal: Callable[[], str | None] | None,
    ) -> KernelRecord:
        """The record of a start the limits allow (called under the user's lock)."""
        why = refusal() if refusal is not None else None
        if why:
            raise Refused(why)
        self._check_limit(user)
        record = KernelRecord(
            id=secrets.token_hex(6),
            user=user,
            server_name=server_name,
            kernel_id=kernel_id,
            profile=profile,
            namespace=((server_pod or {}).get("metadata") or {}).get("namespace") or self.namespace,
            groups=groups,
            ports=self.settings.ports(port_set),
        )
        # the tracker follows the kernel's pod only in a namespace it takes for the hub's own
        self.tracker.own_namespace(record.namespace)
        return record

    async def _launch(
        self, record: KernelRecord, request: GPURequest, server_pod: Any, key: str, scheme: str, notebook_dir: Any, placement: Placement
    ) -> None:
        """Create the pod of a placed kernel and follow its start (``record.task``)."""
        if record.kernel_id:
            ran_on = (record.user, record.server_name, record.kernel_id)
            self._last_sites.pop(ran_on, None)
            self._last_sites[ran_on] = placement.site
            while len(self._last_sites) > LAST_SITES_KEPT:
                self._last_sites.pop(next(iter(self._last_sites)))
        try:
            # a pre-started kernel waiting on that site is the fast path; else a pod of its own
            directory = clean_notebook_dir(notebook_dir)
            if not await prestarted.adopt(self, record, placement, server_pod, key, scheme, directory):
                await self._create_pod(record, placement, server_pod, key, scheme, directory)
        except KernelError:
            raise
        except Exception as exc:
            self.log.exception("Could not create the pod of GPU kernel %s of %s", record.id, record.user)
            raise KernelError(500, f"could not start the GPU kernel on {placement.site}: {exc.__class__.__name__}") from None
        record.task = asyncio.ensure_future(self._watch_start(record, request, server_pod, key, scheme, notebook_dir))

    def _check_limit(self, user: str) -> None:
        limit = self.settings.max_kernels_per_user
        if limit <= 0:
            return
        # a restart stops the old kernel (its record goes) before it starts the new one
        live = [r for r in self.list(user) if self.state(r) in ("pending", "running")]
        if len(live) >= limit:
            held = f"{len(live)} GPU kernel{'s' if len(live) != 1 else ''}"
            raise KernelError(
                409,
                f"You already have {held} running, the most one user may have at once here. Shut one "
                "down (Kernel menu, Shut Down Kernel) and start this one again.",
            )

    def _place(self, record: KernelRecord, request: GPURequest, prefer_site: str | None) -> Placement | NoCapacity:
        tracker = self.tracker
        tried = [a["site"] for a in record.attempts]
        if tried:
            sites = request.allowed_sites if request.allowed_sites is not None else tuple(tracker.snapshot().sites)
            request = replace(request, allowed_sites=tuple(s for s in sites if s not in tried))
        outcome: Placement | NoCapacity = NoCapacity("")
        if (held := lab_classes.refusal_on(request, tracker.snapshot)) is not None:
            return held  # GPUs booked for a lab on now are its class's to take
        try:
            if prefer_site and prefer_site not in tried and (request.allowed_sites is None or prefer_site in request.allowed_sites):
                # a restart goes back where the kernel ran, if it still fits there
                before = tracker.snapshot().site(prefer_site)
                if before is not None:
                    outcome = tracker.placer.place(record.key, replace(request, allowed_sites=(prefer_site,)), time.monotonic())
                    if isinstance(outcome, Placement) and outcome.is_donor:
                        # placed as if the profile allowed that donor alone: say why it is there
                        outcome = replace(outcome, reason=reasons.restarted(before, request.resource))
            if isinstance(outcome, NoCapacity):
                outcome = tracker.placer.place(record.key, request, time.monotonic())
                if prefer_site and isinstance(outcome, Placement) and outcome.site != prefer_site:
                    record.relocated_from = prefer_site
        except PlacementInputError as exc:
            raise KernelError(400, str(exc)) from None
        if isinstance(outcome, Placement):
            tracker.note_decision(record.key, outcome, len(record.attempts) + 1)
        return outcome

    async def _create_pod(
        self, record: KernelRecord, placement: Placement, server_pod: dict[str, Any] | None, key: str, scheme: str, notebook_dir: str
    ) -> None:
        record.placement = placement
        record.pod_name = f"{POD_PREFIX}{record.id}-{len(record.attempts) + 1}"
        files = await decide_files(
            self.settings.files_policy,
            KernelFilesRequest(record.user, record.server_name, placement, notebook_dir, server_pod),
        )
        record.files = files.mode
        notes = []
        if record.relocated_from:
            notes.append(
                f"Note: this kernel restarted on {where(placement)} because {record.relocated_from} has no free "
                f"{placement.resource} now. Variables and imports from before the restart are gone, as after any restart."
            )
        if files.note:
            notes.append(files.note)
        # a donor kernel and its key live in a namespace offloaded to that donor alone
        record.namespace = manifests.kernel_namespace(server_namespace(server_pod, self.namespace), placement)
        if placement.is_donor:
            self.tracker.own_namespace(record.namespace)
            await self.donor_namespaces.ensure(record.namespace, placement.cluster_id)
        ports = record.ports
        secret = manifests.connection_secret(record.pod_name, record.namespace, key, scheme, ports, placement)
        pod = manifests.kernel_pod(
            name=record.pod_name,
            namespace=record.namespace,
            record_id=record.id,
            user=record.user,
            groups=sorted(record.groups),
            server_name=record.server_name,
            profile=record.profile,
            placement=placement,
            attempts=len(record.attempts) + 1,
            image=record.profile.pod_image(self.image),
            ports=ports,
            files=files,
            note="\n".join(notes),
            secret_name=record.pod_name,
            server_pod=server_pod,
            grace_seconds=self.settings.termination_grace_seconds,
            extra_env=dict(self.settings.extra_env),
            command=list(self.settings.command) or None,
            uid=self.settings.uid,
            gid=self.settings.gid,
            fs_gid=self.settings.fs_gid,
            kernel_id=record.kernel_id,
        )
        if self.settings.modify_pod_hook is not None:
            pod = self.settings.modify_pod_hook(pod, placement)
            if inspect.isawaitable(pod):
                pod = await pod
            if not isinstance(pod, dict):
                raise TypeError(f"GPUKernelSettings.modify_pod_hook must return the pod as a dict, not {type(pod).__name__}")
        try:
            await self.api.create_namespaced_secret(record.namespace, secret)
            created = await self.api.create_namespaced_pod(record.namespace, pod)
            uid = created.metadata.uid
            # owned by its pod: the key goes with the kernel, whoever deletes it
            await self.api.patch_namespaced_secret(
                record.pod_name,
                record.namespace,
                {"metadata": {"ownerReferences": [manifests.owner_reference("Pod", record.pod_name, uid)]}},
            )
            if not placement.is_donor:
                # only its server gets in; owned by the pod, it goes with it
                await ingress.admit_server(self.networking, record, uid)
        except BaseException:
            # a create that went through before its error (retried, it answers 409) left its
            # Secret or pod behind: the name is this start's own, so whatever has it goes (a
            # policy created before its error is owned by the pod and goes with it)
            await leftovers.discard(self, record)
            raise
        self.log.info("GPU kernel %s of %s: pod %s on %s (%s)", record.id, record.user, record.pod_name, placement.site, placement.reason)

    async def _watch_start(
        self, record: KernelRecord, request: GPURequest, server_pod: Any = None, key: Any = None, scheme: Any = None, notebook_dir: Any = ""
    ) -> None:
        """Follow the pod until it is ready; move it when the scheduler cannot place it."""
        deadline = record.accepted + self.settings.start_timeout
        grace = float(getattr(self.tracker.settings, "donor_pending_grace_seconds", 30.0))
        seen = False
        pending_since: float | None = None
        try:
            while record.state == "pending":
                pod = self.tracker.pod(record.namespace, record.pod_name)
                if record.prestarted and key is not None and await prestarted.went(self, record, pod, seen):
                    # the pre-started pod it adopted went (preempted, removed, ended): a pod of its own
                    self.log.info("GPU kernel %s: pre-started pod %s went while starting; starting one", record.id, record.pod_name)
                    await self._delete_pod(record, grace=0)
                    record.prestarted, seen = False, False
                    await self._cold_start(record, request, server_pod, key, scheme, notebook_dir)
                    continue
                if pod is not None:
                    seen = True
                    phase = (pod.get("status") or {}).get("phase")
                    why = unschedulable_reason(pod, record.profile.resource)
                    placement = record.placement
                    if (
                        why is None
                        and placement is not None
                        and placement.is_donor
                        and phase == "Pending"
                        and (pod.get("spec") or {}).get("nodeName")
                        and not started_on_donor(pod)
                    ):
                        # the donor's own scheduler failing shows on the origin only as a pod
                        # that stays Pending: past the grace period, the kernel moves
                        pending_since = pending_since or time.monotonic()
                        if time.monotonic() - pending_since >= grace:
                            why = f"still pending on donor {placement.site} after {grace:g} s"
                    else:
                        pending_since = None
                    if why is not None and key is not None and len(record.attempts) < MAX_REDIRECTS:
                        await self._redirect(record, request, why, server_pod, key, scheme, notebook_dir)
                        seen, pending_since = False, None
                        deadline = time.monotonic() + self.settings.start_timeout
                        continue
                    if why is not None:
                        await self._fail(record, why)
                    elif ready(pod):
                        record.state = "running"
                        record.notify()
                    elif phase in ("Succeeded", "Failed"):
                        await self._fail(record, f"the kernel exited while starting ({exit_message(pod)})")
                elif seen:
                    await self._fail(record, "the kernel's pod was deleted while starting")
                if record.state == "pending" and time.monotonic() > deadline:
                    await self._fail(
                        record,
                        f"the kernel did not start within {self.settings.start_timeout:g} s on {record.placement.site if record.placement else '?'}",
                    )
                if record.state == "pending":
                    await self.tracker.wait_pod_change(record.namespace, record.pod_name, 0.5)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user sees a short reason, the log the rest
            self.log.exception("GPU kernel %s: start failed", record.id)
            await self._fail(record, f"could not start the kernel ({exc.__class__.__name__})")

    async def _redirect(
        self, record: KernelRecord, request: GPURequest, why: str, server_pod: Any, key: str, scheme: str, notebook_dir: str
    ) -> None:
        assert record.placement is not None
        record.attempts.append({"site": record.placement.site, "outcome": why})
        self.log.info("GPU kernel %s: moving off %s: %s", record.id, record.placement.site, why)
        await self._delete_pod(record, grace=0)
        self.tracker.forget_decision(record.key)
        outcome = self._place(record, request, None)
        if isinstance(outcome, NoCapacity):
            tried = "; ".join(f"{a['site']} ({a['outcome']})" for a in record.attempts)
            await self._fail(record, f"Tried {tried}. No other site can take it: {outcome.reason}")
            return
        await self._create_pod(record, outcome, server_pod, key, scheme, clean_notebook_dir(notebook_dir))

    async def _cold_start(
        self, record: KernelRecord, request: GPURequest, server_pod: Any, key: str, scheme: str, notebook_dir: str
    ) -> None:
        """Place again (the site's room may have gone with the pod) and start a pod of its own."""
        self.tracker.forget_decision(record.key)
        outcome = self._place(record, request, None)
        if isinstance(outcome, NoCapacity):
            await self._fail(record, f"its pre-started kernel went and no site can take it now: {outcome.reason}")
            return
        await self._create_pod(record, outcome, server_pod, key, scheme, clean_notebook_dir(notebook_dir))

    async def _fail(self, record: KernelRecord, why: str) -> None:
        record.error = why
        record.state = "failed"
        self.log.warning("GPU kernel %s of %s failed: %s", record.id, record.user, why)
        await self._delete_pod(record, grace=0)
        self.tracker.forget_decision(record.key)
        record.notify()

    # ---- stopping -----------------------------------------------------------------------------
    async def stop(self, record: KernelRecord, wait: float = 15.0) -> None:
        """Delete the kernel's pod and free its GPU; returns once the pod is gone (or ``wait``)."""
        if record.task is not None and not record.task.done():
            record.task.cancel()
            await asyncio.gather(record.task, return_exceptions=True)
        await self._delete_pod(record, grace=self.settings.termination_grace_seconds)
        self.tracker.forget_decision(record.key)
        deadline = time.monotonic() + wait
        while self.tracker.pod(record.namespace, record.pod_name) is not None and time.monotonic() < deadline:
            await self.tracker.wait_pod_change(record.namespace, record.pod_name, 0.5)
        if record.state != "failed":
            record.state = "stopped"
        record.notify()
        self.records.pop(record.id, None)

    async def stop_server_kernels(self, user: str, server_name: str) -> int:
        """Stop every kernel of one server (the server is stopping)."""
        records = self.list(user, server_name)
        await asyncio.gather(*(self.stop(r, wait=0) for r in records), return_exceptions=True)
        return len(records)

    async def reap(self, server_running: Callable[[str, str], bool]) -> int:
        """Stop kernels whose server no longer runs; drop failed records after a while."""
        self._adopt()
        reaped = 0
        for record in list(self.records.values()):
            if record.state == "failed":
                if time.time() - record.created > 600:
                    self.records.pop(record.id, None)
                continue
            try:
                running = server_running(record.user, record.server_name)
            except Exception:  # noqa: BLE001 - never reap on doubt
                self.log.debug("GPU kernel reaper: cannot tell whether %s's server runs", record.user, exc_info=True)
                continue
            if not running:
                self.log.info("Reaping GPU kernel %s of %s: its server %r is not running", record.id, record.user, record.server_name)
                await self.stop(record, wait=0)
                reaped += 1
        return reaped

    def start_reaper(self, server_running: Callable[[str, str], bool]) -> None:
        self._server_running = server_running
        self._ensure_reaper()

    def _ensure_reaper(self) -> None:
        if self._reaper is None and getattr(self, "_server_running", None) is not None:
            self._reaper = asyncio.ensure_future(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reap_interval_seconds)
            try:
                await self.reap(self._server_running)
            except Exception:  # noqa: BLE001 - the next sweep tries again
                self.log.exception("GPU kernel reaper failed")

    def _forget(self, record: KernelRecord) -> None:
        self.tracker.forget_decision(record.key)
        self.records.pop(record.id, None)

    async def _delete_pod(self, record: KernelRecord, grace: int) -> None:
        if not record.pod_name:
            return
        try:
            await self.api.delete_namespaced_pod(record.pod_name, record.namespace, grace_period_seconds=grace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        await leftovers.delete_secret(self, record.namespace, record.pod_name)
