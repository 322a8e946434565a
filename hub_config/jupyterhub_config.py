"""jupyterhub_config.py for a non-helm JupyterHub running inside the origin cluster.

The hub runs as a pod with the service account that hub_config/rbac.yaml binds (``hub`` in
``jhub``), so the spawner talks to the API server with in-cluster credentials. The same
settings as hub_config/values.yaml, written out for ``jupyterhub -f``:

    kubectl apply -n jhub -f hub_config/rbac.yaml
    liqoctl offload namespace jhub --pod-offloading-strategy LocalAndRemote
    gpuburst doctor -n jhub --as system:serviceaccount:jhub:hub
    jupyterhub -f hub_config/jupyterhub_config.py

Values that differ per site come from the environment, so this file can be used unchanged.
"""

import os

from jupyter_gpuburst.hub import install

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

NAMESPACE = os.environ.get("GPUBURST_NAMESPACE", "jhub")
IMAGE = os.environ.get("GPUBURST_SINGLEUSER_IMAGE", "registry.example.edu/jupyter-gpuburst/singleuser:0.1.0")

# ---- hub -----------------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpuburst"
c.JupyterHub.bind_url = "http://:8000"
# The proxy and the user pods reach the hub through its Service (named "hub" here).
c.JupyterHub.hub_bind_url = "http://:8081"
c.JupyterHub.hub_connect_url = f"http://hub.{NAMESPACE}.svc:8081"
# Keep running user servers when the hub restarts; the placement is restored from its state.
c.JupyterHub.cleanup_servers = False
# Choose your authenticator; any JupyterHub authenticator works. Groups (for per-group donor
# caps and donor lists) come from it or from c.JupyterHub.load_groups.
# c.JupyterHub.authenticator_class = "generic-oauth"
install(c)  # the admin capacity page and API

# ---- where and how user servers run --------------------------------------------------------
c.KubeSpawner.namespace = NAMESPACE
c.KubeSpawner.image = IMAGE
c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "auto"}
c.KubeSpawner.start_timeout = 600  # a donor may pull the image first

c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "2 CPUs, 8 GB memory, no GPU.",
        "default": True,
        "kubespawner_override": {"cpu_limit": 2, "mem_limit": "8G"},
    },
    {
        "display_name": "1 GPU",
        "slug": "gpu-1",
        "description": "One NVIDIA GPU, on campus when free, otherwise on a peered donor cluster.",
        "kubespawner_override": {"cpu_limit": 8, "mem_limit": "32G", "extra_resource_limits": {"nvidia.com/gpu": "1"}},
    },
    {
        "display_name": "2 GPUs",
        "slug": "gpu-2",
        "description": "Two NVIDIA GPUs on one node, on campus when free, otherwise on a donor.",
        "kubespawner_override": {"cpu_limit": 16, "mem_limit": "64G", "extra_resource_limits": {"nvidia.com/gpu": "2"}},
    },
    {
        "display_name": "MIG slice (1g.10gb)",
        "slug": "mig-1g",
        "description": "A 1g.10gb slice of an A100/H100 (MIG), for small models and teaching.",
        "kubespawner_override": {"cpu_limit": 4, "mem_limit": "16G", "extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}},
    },
]

# ---- placement policy (see the configuration reference in README.md) -----------------------
c.GPUBurstSpawner.strategy = "local-first"
c.GPUBurstSpawner.donor_order = ["polito-hpc"]
c.GPUBurstSpawner.user_donor_cap = 2
c.GPUBurstSpawner.group_donor_caps = {"course-ml101": 8}
c.GPUBurstSpawner.max_redirects = 2
