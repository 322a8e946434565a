"""``GPUBurstProvisioner``: a jupyter_client kernel provisioner whose kernels run where a GPU is free.

The server never talks to Kubernetes. It asks the hub's kernel API, part of the ``gpuburst``
service, at ``$JUPYTER_GPUBURST_KERNELS_URL`` (with its own ``$JUPYTERHUB_API_TOKEN``) to place a kernel; the hub decides from the same ledger as its
spawner, starts the kernel's pod and answers with the pod's address. The kernel manager then
speaks ZMQ to that address as to any kernel. The session key is generated here, sent to the
hub once (which keeps it in a Secret), and never returned by it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
import time
from typing import Any

from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Unicode, default

# set by the hub's spawner: the kernel API of the gpuburst service, as this server reaches it
from jupyter_gpuburst.core.keys import KERNELS_URL_ENV

POLL_CACHE_S = 2.0
# JupyterLab shows a kernel's start error in a <pre> of its fixed-width dialog: a longer line
# runs past the dialog's edge and the student never sees its end
DIALOG_COLUMNS = 72


class KernelPlacementError(web.HTTPError):
    """The hub could not place or start the kernel; jupyter_server sends the message to the
    notebook (an HTTPError's message is shown as is; any other error reads 'Unhandled error')."""

    def __init__(self, message: str, status: int = 503) -> None:
        message = textwrap.fill(message, DIALOG_COLUMNS, break_long_words=False, break_on_hyphens=False)
        # no format args: jupyter_server shows log_message as is
        super().__init__(status, message, reason="GPU kernel not started")
        self.message = message

    def __str__(self) -> str:
        return self.message


class HubKernelClient:
    """The server's side of the hub's kernel API (``/services/gpuburst/api/kernels``)."""

    def __init__(self, kernels_url: str, token: str, timeout: float = 60.0) -> None:
        self.kernels_url = kernels_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    async def request(self, method: str, path: str = "", body: Any = None, timeout: float | None = None) -> tuple[int, Any]:
        url = f"{self.kernels_url}{path}"
        request = HTTPRequest(
            url,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=json.dumps(body) if body is not None else (b"" if method == "POST" else None),
            request_timeout=timeout or self.timeout,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            raise KernelPlacementError(f"the hub cannot be reached ({exc.__class__.__name__})") from None
        data: Any = None
        if response.body:
            try:
                data = json.loads(response.body)
            except ValueError:
                data = None
        if response.code == 599:
            raise KernelPlacementError(f"the hub cannot be reached ({response.error})")
        return response.code, data

    @staticmethod
    def message(code: int, data: Any) -> str:
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
        return f"the hub answered {code}"


def client_from_env(environ: dict[str, str] | None = None) -> HubKernelClient | None:
    environ = environ if environ is not None else os.environ
    url, token = environ.get(KERNELS_URL_ENV), environ.get("JUPYTERHUB_API_TOKEN")
    if not url or not token:
        return None
    return HubKernelClient(url, token)


class GPUBurstProvisioner(KernelProvisionerBase):
    """Starts the kernel in a pod the hub places on the origin or a donor (see module doc)."""

    profile = Unicode(help="Slug of the hub's GPU kernel profile this kernelspec starts.").tag(config=True)
    wait_step_s = Float(20.0, help="Seconds per long-poll while the hub starts the kernel.").tag(config=True)
    start_timeout = Float(
        630.0,
        help="""Seconds to wait for the hub to report the kernel ready: longer than the hub's own
        wait (``GPUKernelSettings.start_timeout``, 600 by default), so its reason arrives first.""",
    ).tag(config=True)
    server_name = Unicode(help="This server's name at the hub (default: $JUPYTERHUB_SERVER_NAME).").tag(config=True)

    @default("server_name")
    def _server_name_default(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVER_NAME", "")

    placement: dict[str, Any] | None = None
    _hub: HubKernelClient | None = None
    _port_set: int | None = None  # the ports the kernel's current (or last) pod listens on
    _poll_at = float("-inf")
    _poll_value: int | None = None
    _notebook_dir = ""
    _withdrawn = False  # shut down by the student before it started (``withdraw``)
    _failure: str | None = None  # why its last start failed, as the notebook was told

    @property
    def hub(self) -> HubKernelClient:
        if self._hub is None:
            client = client_from_env()
            if client is None:
                raise KernelPlacementError(
                    f"GPU kernels need a server started by a hub with jupyter-gpuburst (no {KERNELS_URL_ENV}/JUPYTERHUB_API_TOKEN)"
                )
            self._hub = client
        return self._hub

    @hub.setter
    def hub(self, client: HubKernelClient) -> None:
        self._hub = client

    @property
    def has_process(self) -> bool:
        return self.placement is not None

    @property
    def placement_id(self) -> str | None:
        return (self.placement or {}).get("id")

    # ---- launching ----------------------------------------------------------------------------
    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        cwd = kwargs.get("cwd")
        root = getattr(getattr(km, "parent", None), "root_dir", None) or os.getcwd()
        if cwd:
            try:
                relative = os.path.relpath(os.path.abspath(cwd), os.path.abspath(root))
                self._notebook_dir = "" if relative.startswith("..") else relative.replace(os.sep, "/")
            except ValueError:
                self._notebook_dir = ""
        kwargs = await super().pre_launch(**kwargs)
        # the hub decides the command; the kernelspec's argv only says it is a Python kernel
        kwargs.setdefault("cmd", list(self.kernel_spec.argv))
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        try:
            return await self._launch()
        except KernelPlacementError as exc:
            # A pending kernel's start fails after its session was made: the kernel's model
            # (which JupyterLab reads when the websocket closes) says it is dead, and why
            km = self.parent
            km.execution_state = "dead"
            km.reason = self._failure = str(exc)
            raise

    async def _launch(self) -> dict[str, Any]:
        self._withdrawn = False
        self._failure = None
        km = self.parent
        key = km.session.key.decode() if isinstance(km.session.key, bytes) else str(km.session.key)
        if not key:
            raise KernelPlacementError("the kernel manager has no session key; refusing an unsigned kernel")
        body = {
            "profile": self.profile,
            "key": key,
            "signature_scheme": km.session.signature_scheme,
            "kernel_id": self.kernel_id or "",
            "server_name": self.server_name,
            "notebook_dir": self._notebook_dir,
        }
        # where a restarted kernel goes is the hub's to say, from its own record of where it ran
        if self._port_set is not None:
            body["port_set"] = self._next_port_set()
        code, data = await self.hub.request("POST", "", body)
        if code != 202 or not isinstance(data, dict):
            raise KernelPlacementError(f"No GPU kernel: {self.hub.message(code, data)}")
        self.placement = data
        if data.get("queue"):
            self.log.info("GPU kernel %s: waiting for %s", data.get("id"), data.get("waiting"))
        else:
            self.log.info("GPU kernel %s: placed on %s (%s)", data.get("id"), data.get("site"), data.get("reason"))
        deadline = time.monotonic() + self.start_timeout
        while data.get("state") == "pending":
            if time.monotonic() > deadline:
                await self._delete()
                raise KernelPlacementError(f"No GPU kernel: not ready within {self.start_timeout:g} s")
            # ``seen``: a change made after this answer (the queue's place, set once the start was
            # accepted) returns at once rather than at the next change or after the whole step
            seen = f"&seen={data['version']}" if isinstance(data.get("version"), int) else ""
            code, fresh = await self.hub.request("GET", f"/{data['id']}?wait={self.wait_step_s:g}{seen}", timeout=self.wait_step_s + 30)
            if code != 200 or not isinstance(fresh, dict):
                await self._delete()
                if self._withdrawn:
                    raise KernelPlacementError("No GPU kernel: it was shut down before it started")
                raise KernelPlacementError(f"No GPU kernel: {self.hub.message(code, fresh)}")
            data = fresh
            self.placement = data
        if data.get("state") != "running" or not data.get("connection"):
            self.placement = None
            if self._withdrawn:
                raise KernelPlacementError("No GPU kernel: it was shut down before it started")
            raise KernelPlacementError(f"No GPU kernel: {data.get('error') or 'it stopped while starting'}")
        self._port_set = body.get("port_set", 0)
        self._poll_at, self._poll_value = time.monotonic(), None
        # An interrupt while the kernel was pending made jupyter_client connect its control
        # socket to the address it knew then (none yet, or the previous pod's), and it keeps a
        # connected socket: every later interrupt and shutdown request would go there, lost.
        # Closed, it is connected to this pod once the launch returns.
        km._close_control_socket()
        connection = data["connection"]
        self.connection_info = {
            "transport": connection["transport"],
            "ip": connection["ip"],
            "shell_port": connection["shell_port"],
            "iopub_port": connection["iopub_port"],
            "stdin_port": connection["stdin_port"],
            "control_port": connection["control_port"],
            "hb_port": connection["hb_port"],
            "key": km.session.key,
            "signature_scheme": km.session.signature_scheme,
            "kernel_name": getattr(km, "kernel_name", "") or "",
        }
        return self.connection_info

    def _next_port_set(self) -> int:
        """The other set of ports than the previous pod's, for a restart.

        A restarted kernel runs in a new pod at a new address. jupyter_server tells a moved kernel
        by its ports only: a websocket that reconnects after the restart gets new sockets, and the
        activity watch (which the culler reads) follows the kernel, only when the ports differ
        from those it holds. It updates what it holds only on some reconnects, so first it is told
        to hold the previous pod's ports; then the new pod's differ from them whatever happened
        since the kernel started.
        """
        kernels = getattr(self.parent, "parent", None)
        if self.kernel_id and callable(getattr(kernels, "ports_changed", None)):
            try:
                kernels.ports_changed(self.kernel_id)
            except (KeyError, AssertionError, web.HTTPError):  # not that manager's kernel
                pass
        return 1 - (self._port_set or 0)

    # ---- liveness -----------------------------------------------------------------------------
    async def poll(self) -> int | None:
        """None while the kernel's pod runs; an exit code once it stopped or failed."""
        if self.placement is None:
            return 0
        now = time.monotonic()
        if now - self._poll_at < POLL_CACHE_S:
            return self._poll_value
        try:
            code, data = await self.hub.request("GET", f"/{self.placement_id}", timeout=10)
        except KernelPlacementError:
            # the hub restarting is no reason to restart the kernel
            return None
        self._poll_at = now
        if code == 404:
            self._poll_value = 1
        elif code == 200 and isinstance(data, dict):
            self.placement = {**self.placement, **data}
            state = data.get("state")
            self._poll_value = None if state in ("running", "pending") else (1 if state == "failed" else 0)
        else:
            self._poll_value = None
        return self._poll_value

    async def wait(self) -> int | None:
        while True:
            self._poll_at = float("-inf")
            status = await self.poll()
            if status is not None:
                return status
            await asyncio.sleep(0.5)

    async def send_signal(self, signum: int) -> None:
        # interrupts go through the control channel (interrupt_mode "message"); only the
        # signals that end a kernel mean something to a pod
        if signum in (signal.SIGKILL, signal.SIGTERM):
            await self._delete()

    async def kill(self, restart: bool = False) -> None:
        await self._delete()

    async def terminate(self, restart: bool = False) -> None:
        await self._delete()

    async def cleanup(self, restart: bool = False) -> None:
        await self._delete()
        if not restart:
            self._port_set = None

    async def withdraw(self) -> bool:
        """The student shut the kernel down before it started: the hub forgets its request
        (leaves the queue, frees what it held) and the start ends with "cancelled"."""
        if self.placement_id is None:
            return False
        self._withdrawn = True
        await self._delete()
        return True

    async def _delete(self) -> None:
        record = self.placement_id
        if record is None:
            return
        try:
            code, data = await self.hub.request("DELETE", f"/{record}", timeout=60)
            if code not in (204, 404):
                self.log.warning("GPU kernel %s: the hub refused to stop it: %s", record, self.hub.message(code, data))
                return
        except KernelPlacementError as exc:
            self.log.warning("GPU kernel %s: %s; the hub's reaper will stop it", record, exc)
        self.placement = None
        self._poll_value = 0

    # ---- persistence and limits ---------------------------------------------------------------
    async def get_provisioner_info(self) -> dict[str, Any]:
        info = await super().get_provisioner_info()
        info.update({"profile": self.profile, "placement": self.placement, "port_set": self._port_set})
        return info

    async def load_provisioner_info(self, provisioner_info: dict) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.profile = provisioner_info.get("profile", self.profile)
        self.placement = provisioner_info.get("placement")
        self._port_set = provisioner_info.get("port_set")

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 10.0)

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        return max(recommended, self.start_timeout)

    def public_placement(self) -> dict[str, Any] | None:
        """Where the kernel runs, for the GPU panel (no address, no key); a kernel whose start
        failed is listed as such, by its name and why, until it is shut down."""
        if self.placement is None:
            if self._failure is None:
                return None
            display_name = getattr(self.kernel_spec, "display_name", None) or self.profile
            return {k: None for k in PUBLIC_FIELDS} | {
                "profile": self.profile,
                "display_name": display_name,
                "state": "failed",
                "error": self._failure,
            }
        return {k: self.placement.get(k) for k in PUBLIC_FIELDS}


# what the panel may know of a kernel's record at the hub
PUBLIC_FIELDS = (
    "id",
    "profile",
    "display_name",
    "state",
    "site",
    "site_kind",
    "cluster_id",
    "node",
    "resource",
    "count",
    "reason",
    "waiting",
    "queue",
    "relocated_from",
    "files",
    "error",
)


def remote_kernels(kernel_manager: Any) -> list[dict[str, Any]]:
    """Where each of this server's GPU kernels runs: site, node, GPU (for the panel)."""
    out = []
    for kernel_id in list(kernel_manager.list_kernel_ids()):
        try:
            kernel = kernel_manager.get_kernel(kernel_id)
        except KeyError:
            continue
        provisioner = getattr(kernel, "provisioner", None)
        if isinstance(provisioner, GPUBurstProvisioner):
            placement = provisioner.public_placement()
            if placement is not None:
                out.append({"kernel_id": kernel_id, "kernel_name": getattr(kernel, "kernel_name", ""), **placement})
    return out
