"""Where the real control plane's binaries are: those ``tools/kube/build`` (``make kube``) made.

``GPUBURST_KUBE_BIN`` names a folder holding them; otherwise the build's cache (``$GPUBURST_KUBE_CACHE``,
else ``$XDG_CACHE_HOME`` or ``~/.cache``, ``/jupyter-gpuburst/kube``), whose ``current`` link the
build points at its newest complete build.
"""

from __future__ import annotations

import os
from pathlib import Path

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class ControlPlaneMissing(RuntimeError):
    """The binaries are not built here."""


def cache_dir() -> Path:
    if os.environ.get("GPUBURST_KUBE_CACHE"):
        return Path(os.environ["GPUBURST_KUBE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter-gpuburst" / "kube"


def locate() -> Path:
    """The folder holding every binary in ``NAMES``, or ControlPlaneMissing saying how to build them."""
    return _built("GPUBURST_KUBE_BIN", "current", NAMES, "the real control plane is not built", ", or use the emulator (the default)")


def _built(env: str, link: str, names: tuple[str, ...], what: str, instead: str = "") -> Path:
    """``$env``'s folder, else the build cache's ``link``/bin, if it holds every one of ``names``."""
    folder = Path(os.environ[env]) if os.environ.get(env) else cache_dir() / link / "bin"
    missing = [name for name in names if not os.access(folder / name, os.X_OK)]
    if missing:
        raise ControlPlaneMissing(
            f"{what} ({', '.join(missing)} missing in {folder}); build it with `make kube` (needs Go >= 1.25){instead}"
        )
    return folder


def available() -> bool:
    return missing() is None


def missing() -> str | None:
    """Why the real control plane cannot run here (one line, saying how to build it), or None."""
    try:
        locate()
    except ControlPlaneMissing as exc:
        return str(exc)
    return None


LIQO_NAMES = ("virtual-kubelet", "liqo-controller-manager")


def liqo_locate() -> Path:
    """The folder holding Liqo's own programs (``LIQO_NAMES``), which the same build makes beside
    the control plane, under ``liqo-current`` (``GPUBURST_LIQO_BIN`` names another), or
    ControlPlaneMissing saying how to build them."""
    return _built("GPUBURST_LIQO_BIN", "liqo-current", LIQO_NAMES, "Liqo's programs are not built")
