"""Kernelspecs for the hub's GPU kernel profiles ("Python 3 (1 GPU)", ...), one per profile.

They are asked of the hub once when the server starts (the hub's config is the one truth) and
written to a directory of the server's runtime dir that the kernelspec manager also searches.
Each names the ``gpuburst`` provisioner and the profile; the hub decides image and command.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core.keys import KERNELS_URL_ENV, KERNELSPEC_PREFIX

log = logging.getLogger(__name__)

PROVISIONER = "gpuburst"
PREFIX = KERNELSPEC_PREFIX
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def kernelspec(profile: dict[str, Any]) -> dict[str, Any]:
    """kernel.json of one GPU kernel profile."""
    return {
        # not run here: the hub starts the kernel in its pod (see jupyter_gpuburst.kernel.pod)
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": str(profile["display_name"]),
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {
            "debugger": False,
            "kernel_provisioner": {"provisioner_name": PROVISIONER, "config": {"profile": profile["slug"]}},
            "gpuburst": {"resource": profile.get("resource"), "count": profile.get("count")},
        },
    }


def write_kernelspecs(directory: Path, profiles: list[dict[str, Any]]) -> list[str]:
    """Replace the generated kernelspecs under ``directory``; returns the kernel names."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"{PREFIX}*"):
        shutil.rmtree(old, ignore_errors=True)
    names = []
    for profile in profiles:
        slug = profile.get("slug")
        if not isinstance(slug, str) or not SLUG.match(slug) or not profile.get("display_name"):
            log.warning("GPU kernels: skipping a malformed profile from the hub: %r", profile)
            continue
        name = f"{PREFIX}{slug}"
        (directory / name).mkdir()
        (directory / name / "kernel.json").write_text(json.dumps(kernelspec(profile), indent=1))
        names.append(name)
    return names


def fetch_profiles(kernels_url: str, token: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The GPU kernel profiles the hub offers this server's user (empty without the scope)."""
    request = urllib.request.Request(kernels_url, headers={"Authorization": f"token {token}"})  # noqa: S310 - the hub's own URL
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the hub's own URL
            data = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 403:
            log.info("GPU kernels: not offered to this user (%s)", _message(exc) or "no kernel scope")
        elif exc.code == 404:
            log.info("GPU kernels: this hub has no kernel API")
        else:
            log.warning("GPU kernels: the hub answered %s; no GPU kernels in the launcher", exc.code)
        return []
    except (OSError, ValueError) as exc:
        log.warning("GPU kernels: cannot ask the hub for them (%s)", exc.__class__.__name__)
        return []
    profiles = data.get("profiles") if isinstance(data, dict) else None
    return [p for p in profiles or [] if isinstance(p, dict)]


def _message(exc: urllib.error.HTTPError) -> str:
    """The hub's one-line reason (which scope is missing), never more than that."""
    try:
        body = json.loads(exc.read(4096) or b"{}")
    except (OSError, ValueError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return str(message)[:300] if message else ""


def install_kernelspecs(kernel_spec_manager: Any, runtime_dir: str, environ: dict[str, str] | None = None) -> list[str]:
    """Fetch the hub's GPU kernel profiles and make them kernelspecs of this server."""
    environ = environ if environ is not None else dict(os.environ)

    url, token = environ.get(KERNELS_URL_ENV), environ.get("JUPYTERHUB_API_TOKEN")
    if not url or not token:
        return []
    directory = Path(runtime_dir) / "gpuburst-kernels"
    names = write_kernelspecs(directory, fetch_profiles(url, token))
    if names and str(directory) not in kernel_spec_manager.kernel_dirs:
        kernel_spec_manager.kernel_dirs = [*kernel_spec_manager.kernel_dirs, str(directory)]
    return names
