"""Hub-side additions: the admin capacity API and page, and Prometheus metrics.

Enable both in ``jupyterhub_config.py`` with one line::

    from jupyter_gpuburst.hub import install; install(c)

Metrics need no setup: they register in JupyterHub's registry when the spawner first records
something, and appear at ``/hub/metrics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATES = str(Path(__file__).with_name("templates"))


def install(c: Any, tracker_source: Any = None) -> None:
    """Add the capacity API (``/hub/api/gpuburst/capacity``) and page (``/hub/gpuburst/capacity``),
    and the GPU kernel API (``/hub/api/gpuburst/kernels``, see ``jupyter_gpuburst.hub.kernels``).

    ``c`` is the config object of ``jupyterhub_config.py``. Calling it twice changes nothing.
    Raises ``ProfilePolicyError`` (the hub does not start) when a profile's
    ``kubespawner_override`` sets a placement trait that can only be set hub-wide.
    ``tracker_source(handler)`` may replace the hub's shared ``CapacityTracker`` (tests, or a
    hub whose spawner is configured elsewhere).
    """
    from jupyter_gpuburst.hub import metrics  # noqa: F401 - /hub/metrics shows the series from hub start
    from jupyter_gpuburst.hub.handlers import handlers
    from jupyter_gpuburst.hub.profile_policy import check_profiles
    from jupyter_gpuburst.hub.settings import spawner_sections

    # A profile that sets a hub-wide placement trait stops the hub here, at start, with the reason
    for section in ["KubeSpawner", *spawner_sections(c)]:
        if section in c and "profile_list" in c[section]:
            check_profiles(c[section]["profile_list"])

    section = c.JupyterHub
    ours = handlers(tracker_source)
    # ---- GPU kernels: the kernel-placement API (/hub/api/gpuburst/kernels) and its scope.
    # Kept apart so it can move, with the capacity API, into a hub-managed service.
    from jupyter_gpuburst.hub.kernels import install as install_kernels

    ours += install_kernels(c)
    # ---- end GPU kernels
    paths = {route[0] for route in ours}
    extra = [route for route in _configured(section, "extra_handlers") if route[0] not in paths]
    section.extra_handlers = extra + ours
    # appended, so an admin's own template directories can still override our pages: the
    # capacity page, and spawn_pending.html, which pins the placement decision above the bar
    template_paths = _configured(section, "template_paths")
    if TEMPLATES not in template_paths:
        template_paths.append(TEMPLATES)
    section.template_paths = template_paths


def _configured(section: Any, name: str) -> list:
    """A list trait's configured value; unset ones read as traitlets' lazy values, not lists."""
    if name in section:
        value = section[name]
        if isinstance(value, list | tuple):
            return list(value)
        # e.g. `c.JupyterHub.template_paths.append(...)` earlier: a lazy value with additions
        return list(value.get_value([]))
    return []
