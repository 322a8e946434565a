"""Hub-side additions: the spawner, the ``gpuburst`` service (capacity, GPU kernels), profile
checks, metrics.

Enable them in ``jupyterhub_config.py`` with one line::

    from jupyter_gpuburst.hub import install; install(c)

Metrics need no setup: they register in JupyterHub's registry when the spawner first records
something, and appear at ``/hub/metrics``.

One folder per concern: ``spawner/`` (GPUBurstSpawner and what only it uses), ``capacity/``
(the capacity tracker, its watches, the admin report), ``kernels/`` (remote GPU kernels),
``profiles/`` (what a profile asks for, and which traits it may set), ``sites/`` (what running
a pod on a site takes: Liqo offloading, storage, the scheduler's refusals); beside them what
several use: ``settings``, ``metrics``, ``retry``, ``ports``, and ``service`` (the HTTP service
that serves the capacity and kernel APIs).
"""

from jupyter_gpuburst.core import lazy

__all__ = ["DEFAULT_SERVICE_PORT", "install"]
# the installer imports JupyterHub's whole app: only where install(c) is called
__getattr__ = lazy.exports(__name__, dict.fromkeys(__all__, "installer"))
