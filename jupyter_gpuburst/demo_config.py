"""JupyterHub config for `gpuburst demo`: GPUBurstSpawner against the local federation.

`gpuburst demo` starts the federation, then runs ``jupyterhub -f`` with this file
with the environment below; nothing here is specific to one machine. Users log in with any
name and the shared demo password (DummyAuthenticator); ``teacher`` is an admin and sees the
capacity page at /services/gpuburst/capacity.

Environment (set by `gpuburst demo`):
  KUBECONFIG                    the federation's kubeconfig (current context: the origin)
  GPUBURST_DEMO_PORT            public port (the proxy)
  GPUBURST_DEMO_HUB_PORT        the hub's own port
  GPUBURST_DEMO_PROXY_API_PORT  the proxy's REST API port
  GPUBURST_DEMO_STATE_DIR       hub database, cookie secret and logs
  GPUBURST_DEMO_PASSWORD        the shared password
  GPUBURST_DEMO_NAMESPACE       the (offloaded) namespace user servers run in
"""

import os
import sys
from pathlib import Path

from jupyter_gpuburst.hub import install

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

env = os.environ
state = Path(env["GPUBURST_DEMO_STATE_DIR"])
bin_dir = Path(sys.executable).parent  # the venv: the single-user command lives here

# ---- hub and proxy, on 127.0.0.1 only -------------------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env["GPUBURST_DEMO_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env["GPUBURST_DEMO_HUB_PORT"])
# The Python configurable-http-proxy from PyPI (same REST API as the Node one, no Node runtime),
# run with streamed responses so spawn progress and the GPU panel's live stream get through.
c.ConfigurableHTTPProxy.command = [sys.executable, "-m", "jupyter_gpuburst.proxy"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['GPUBURST_DEMO_PROXY_API_PORT']}"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
# Ctrl-C on the demo stops every server: their pods are deleted, their processes end.
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# ---- who can log in -------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = env["GPUBURST_DEMO_PASSWORD"]
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"teacher"}
install(c)  # the admin capacity page and API

# ---- the spawner ----------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpuburst"
c.KubeSpawner.namespace = env.get("GPUBURST_DEMO_NAMESPACE", "default")
# The federation's kubelet runs the container command as a local process.
c.KubeSpawner.cmd = [str(bin_dir / "jupyterhub-singleuser")]
c.KubeSpawner.args = ["--allow-root"]
c.KubeSpawner.start_timeout = 90
c.KubeSpawner.http_timeout = 60
c.Spawner.default_url = "/lab"


def _simulated(gpus: int) -> dict:
    """Environment for the server extension: simulated GPUs, as many as the profile asks."""
    return {"JUPYTER_GPUBURST_BACKEND": "simulated", "JUPYTER_GPUBURST_SIM_GPUS": str(gpus)}


c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "none"}
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "No GPU.",
        "default": True,
    },
    {
        "display_name": "1 GPU",
        "slug": "gpu-1",
        "description": "One GPU: on the origin when free, otherwise on a donor.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "environment": _simulated(1)},
    },
    {
        "display_name": "2 GPUs",
        "slug": "gpu-2",
        "description": "Two GPUs on one node: on the origin when free, otherwise on a donor.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "2"}, "environment": _simulated(2)},
    },
    {
        "display_name": "MIG slice (1g.10gb)",
        "slug": "mig-1g",
        "description": "A 1g.10gb slice of the origin's MIG-partitioned GPU.",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}, "environment": _simulated(1)},
    },
]

c.GPUBurstSpawner.strategy = "local-first"
