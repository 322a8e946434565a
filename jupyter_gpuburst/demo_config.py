"""JupyterHub config for `gpuburst demo`: GPUBurstSpawner against the local federation.

`gpuburst demo` starts the federation, then runs ``jupyterhub -f`` with this file
with the environment below; nothing here is specific to one machine. Users log in with any
name and the shared demo password (SharedPasswordAuthenticator); ``teacher``, the admin, logs in
with a password of its own and sees the capacity page at /services/gpuburst/capacity.

Environment (set by `gpuburst demo`):
  KUBECONFIG                    the federation's kubeconfig (current context: the origin)
  GPUBURST_DEMO_PORT            public port (the proxy)
  GPUBURST_DEMO_HUB_IP          the hub's own address (default 127.0.0.1)
  GPUBURST_DEMO_HUB_PORT        the hub's own port
  GPUBURST_DEMO_PROXY_API_PORT  the proxy's REST API port
  GPUBURST_DEMO_STATE_DIR       hub database, cookie secret and logs
  GPUBURST_DEMO_PASSWORD        the shared password
  GPUBURST_DEMO_ADMIN_PASSWORD  the admin's password (32 characters or more)
  GPUBURST_DEMO_NAMESPACE       the (offloaded) namespace user servers run in
  GPUBURST_DEMO_GPU_PRODUCTS    site -> GPU resource -> the simulated GPUs' model (demo.gpu_products)
  GPUBURST_DEMO_REAL_GPUS       site -> the GPU resources that are this machine's own (demo.real_gpus)
  GPUBURST_DEMO_NODE_GPUS       the most whole GPUs one node has (the largest GPU kernel's count)
  GPUBURST_DEMO_USER_CONFIG     the admin's own config (`--config`), loaded last; empty: none
"""

import json
import os
import sys
from pathlib import Path

from kubernetes_asyncio.client import V1EnvVar

from jupyter_gpuburst.core.keys import BACKEND_ENV, SIM_GPUS_ENV, SIM_MODEL_ENV
from jupyter_gpuburst.demo import KERNEL_PROFILE, proxy_command
from jupyter_gpuburst.demo_lab import GROUP, MEMBERS
from jupyter_gpuburst.hub import install
from jupyter_gpuburst.hub.kernels.settings import profiles_from_server_profiles

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

env = os.environ
state = Path(env["GPUBURST_DEMO_STATE_DIR"])
bin_dir = Path(sys.executable).parent  # the venv: the single-user command lives here

# ---- hub and proxy, on loopback only -------------------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env["GPUBURST_DEMO_PORT"])
# 127.0.0.2 when pods have network namespaces of their own (their 127.0.0.1 is theirs)
c.JupyterHub.hub_ip = env.get("GPUBURST_DEMO_HUB_IP", "127.0.0.1")
c.JupyterHub.hub_port = int(env["GPUBURST_DEMO_HUB_PORT"])
# JupyterHub's own configurable-http-proxy, installed by the same `npm ci` that builds the
# Lab extension (node_modules/.bin); the hub starts and stops it as in production.
c.ConfigurableHTTPProxy.command = proxy_command()
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['GPUBURST_DEMO_PROXY_API_PORT']}"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
# Ctrl-C on the demo stops every server: their pods are deleted, their processes end.
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# ---- who can log in -------------------------------------------------------------------------
# any name with the users' password; the admin, teacher, with a password of its own
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = env["GPUBURST_DEMO_PASSWORD"]
c.SharedPasswordAuthenticator.admin_password = env["GPUBURST_DEMO_ADMIN_PASSWORD"]
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"teacher"}
# the class of the lab the demo has booked (demo_lab.py), so that the labs page shows one
c.JupyterHub.load_groups = {GROUP: {"users": list(MEMBERS)}}
# GPU kernels for everyone in the demo (a real hub grants these scopes per group, see docs/kernels.md);
# before install(c), which adds the gpuburst service's own role to this list (an assignment
# after it would drop that role, and with it the scopes culling and budgets stop servers with)
c.JupyterHub.load_roles = [
    {"name": "user", "scopes": ["self", "custom:gpuburst:kernels!user", "access:services!service=gpuburst"]},
]
install(c)  # the gpuburst service: admin capacity page, and the GPU kernel API of kernel mode

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


GPU_PRODUCTS = json.loads(env.get("GPUBURST_DEMO_GPU_PRODUCTS") or "{}")
REAL_GPUS = json.loads(env.get("GPUBURST_DEMO_REAL_GPUS") or "{}")


def _real(site, resource):
    """Whether the site's devices of this resource are this machine's own GPUs (`--gpus auto`)."""
    return resource in REAL_GPUS.get(site, [])


def _read_real_gpus(env_list, name_of, make):
    """The container's env with the simulated backend's entries replaced by NVML: the kubelet
    gives the pod its devices (NVIDIA_VISIBLE_DEVICES), and the server or kernel reads those."""
    kept = [e for e in env_list if name_of(e) not in (BACKEND_ENV, SIM_GPUS_ENV, SIM_MODEL_ENV)]
    return [*kept, make(BACKEND_ENV, "nvml")]


def _sim_model_env(site, resource):
    """Simulated GPUs of the model the chosen site's nodes are labelled with (see demo.gpu_products),
    as an env var for the pod; None where the site's nodes say no model.

    On a real cluster the device plugin hands the container the node's own GPUs; here the
    simulated backend is told which model to pretend, after the placement is known.
    """
    product = GPU_PRODUCTS.get(site, {}).get(resource)
    return {"name": "JUPYTER_GPUBURST_SIM_MODEL", "value": product} if product else None


def _gpu_like_the_node(spawner, pod):
    placement = spawner.gpuburst_placement
    container = pod.spec.containers[0]
    if placement and _real(placement["site"], placement["resource"]):
        container.env = _read_real_gpus(container.env or [], lambda e: e.name, lambda n, v: V1EnvVar(name=n, value=v))
        return pod
    env = _sim_model_env(placement["site"], placement["resource"]) if placement else None
    if env:
        pod.spec.containers[0].env.append(V1EnvVar(**env))
    return pod


c.KubeSpawner.modify_pod_hook = _gpu_like_the_node


def _kernel_gpu_like_the_node(pod, placement):
    """The same for a GPU kernel's pod, which the hub's kernel registry builds as a dict."""
    container = pod["spec"]["containers"][0]
    if _real(placement.site, placement.resource):
        container["env"] = _read_real_gpus(container.get("env") or [], lambda e: e["name"], lambda n, v: {"name": n, "value": v})
        return pod
    env = _sim_model_env(placement.site, placement.resource)
    if env:
        pod["spec"]["containers"][0]["env"].append(env)
    return pod


c.GPUKernelSettings.modify_pod_hook = _kernel_gpu_like_the_node


c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "none"}
c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "No GPU.",
        "default": True,
    },
    {
        "display_name": KERNEL_PROFILE,
        "slug": "cpu-gpu-kernels",
        "description": "Your server and files stay on the origin; each GPU kernel you start from the "
        "launcher runs where a GPU is free, and gives it back when it stops.",
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
# every profile but "CPU only" offers GPU kernels: a student who picked no GPU gets none
c.GPUKernelSettings.server_profiles = {p["slug"]: ["*"] for p in c.KubeSpawner.profile_list if p["slug"] != "cpu"}
# GPU kernels' pods measure their own GPU for the panel: simulated GPUs, as the servers' are
c.GPUKernelSettings.extra_env = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
# A new user should meet the queue: a GPU kernel that takes a whole node's GPUs (the donor's 8
# by default) fills a site at once; started again until no site has that many free, the last
# one waits in line, its place and Cancel in the status bar and the GPU panel. The limit lets
# one user take every site this way (8 donors and the origin at most) and wait for one more.
_whole = int(env.get("GPUBURST_DEMO_NODE_GPUS") or "8")
c.GPUKernelSettings.profiles = [
    *(kernels := profiles_from_server_profiles(c.KubeSpawner.profile_list)),
    *([] if any(k["resource"] == "nvidia.com/gpu" and k["count"] == _whole for k in kernels) else [{"count": _whole}]),
]
c.GPUKernelSettings.queue_when_full = True
c.GPUKernelSettings.max_kernels_per_user = 10

c.GPUBurstSpawner.strategy = "local-first"

# ---- the admin's own settings (`gpuburst demo --config FILE`) ------------------------------
# last, as `jupyterhub -f FILE` would load it: what it sets wins over the demo's own
if env.get("GPUBURST_DEMO_USER_CONFIG"):
    load_subconfig(env["GPUBURST_DEMO_USER_CONFIG"])  # noqa: F821 - provided with get_config
