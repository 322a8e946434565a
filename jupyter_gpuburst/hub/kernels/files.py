"""Where a GPU kernel's files are: the user's volume when the storage policy allows, else scratch.

The storage policy (which volumes may follow a pod to which site) is decided elsewhere; this
module is the one place kernel pods ask it, through ``GPUKernelSettings.files_policy``. Without
a policy, or when it answers None, the kernel gets scratch space and the notebook is told once.
"""

from __future__ import annotations

import inspect
import posixpath
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpuburst.core.placement import Placement

SCRATCH_VOLUME = "gpuburst-scratch"
SCRATCH_PATH = "/scratch"


@dataclass(frozen=True)
class KernelFilesRequest:
    """What a policy needs to decide: who, which server, where the kernel would run, where the
    notebook is (relative to the server's root directory), and the server's pod as the API
    server returns it (its volumes and mounts say where the user's files are)."""

    user: str
    server_name: str
    placement: Placement
    notebook_dir: str
    server_pod: dict[str, Any] | None = None


@dataclass(frozen=True)
class KernelFiles:
    """Volumes for the kernel pod, and the directory it starts in."""

    working_dir: str  # "" for the image's own working directory
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "volume"  # "volume": the user's files; "scratch": an empty directory
    note: str = ""


def clean_notebook_dir(raw: Any) -> str:
    """The notebook's directory relative to the server's root; never escapes it."""
    if not isinstance(raw, str) or not raw:
        return ""
    path = posixpath.normpath("/" + raw.replace("\\", "/")).lstrip("/")
    return "" if path == "." else path


def shared_storage(request: KernelFilesRequest) -> KernelFiles | None:
    """The files policy for storage every site reaches (``storage_policy = "shared"``).

    The kernel pod mounts the server's claims where the server mounts them and starts in the
    notebook's directory. Only shared storage allows this: a ReadWriteOnce home volume bound
    to one node cannot also be mounted by a pod on another node or site.
    """
    spec = (request.server_pod or {}).get("spec") or {}
    claims = {v["name"]: v for v in spec.get("volumes") or [] if (v.get("persistentVolumeClaim") or {}).get("claimName")}
    containers = spec.get("containers") or []
    notebook = next((c for c in containers if c.get("name") == "notebook"), containers[0] if containers else {})
    mounts = [m for m in notebook.get("volumeMounts") or [] if m.get("name") in claims]
    if not mounts:
        return None
    root = notebook.get("workingDir") or mounts[0]["mountPath"]
    working = posixpath.join(root, request.notebook_dir) if request.notebook_dir else root
    used = list(dict.fromkeys(m["name"] for m in mounts))
    return KernelFiles(
        working_dir=working,
        volumes=[claims[name] for name in used],
        volume_mounts=[{k: m[k] for k in ("name", "mountPath", "subPath", "readOnly") if k in m} for m in mounts],
        mode="volume",
    )


def scratch(placement: Placement) -> KernelFiles:
    # the panel's words for a site: "donor-1, a donor cluster", "the origin"
    where = f"{placement.site}, a donor cluster," if placement.is_donor else "a GPU node of the origin"
    note = (
        f"Note: this GPU kernel runs on {where} without your files. It starts in an "
        f"empty scratch directory ({SCRATCH_PATH}) that is deleted when the kernel stops; save results "
        "by returning them to the notebook or copying them to storage you can reach from here."
    )
    # no workingDir: the kernel's entry point moves into the scratch mount (or, where volumes
    # are not mounted, a fresh private directory), so it never starts in a shared one
    return KernelFiles(
        working_dir="",
        volumes=[{"name": SCRATCH_VOLUME, "emptyDir": {}}],
        volume_mounts=[{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH}],
        mode="scratch",
        note=note,
    )


async def decide_files(policy: Any, request: KernelFilesRequest) -> KernelFiles:
    """Ask the admin's policy; scratch space when there is none or it declines."""
    if policy is not None:
        decided = policy(request)
        if inspect.isawaitable(decided):
            decided = await decided
        if decided is not None:
            if not isinstance(decided, KernelFiles):
                raise TypeError(f"files_policy must return KernelFiles or None, not {type(decided).__name__}")
            return decided
    return scratch(request.placement)
