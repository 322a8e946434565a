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
    """Add the capacity API (``/hub/api/gpuburst/capacity``) and page (``/hub/gpuburst/capacity``).

    ``c`` is the config object of ``jupyterhub_config.py``. Calling it twice changes nothing.
    ``tracker_source(handler)`` may replace the hub's shared ``CapacityTracker`` (tests, or a
    hub whose spawner is configured elsewhere).
    """
    from jupyter_gpuburst.hub import metrics  # noqa: F401 - /hub/metrics shows the series from hub start
    from jupyter_gpuburst.hub.handlers import handlers

    section = c.JupyterHub
    ours = handlers(tracker_source)
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
