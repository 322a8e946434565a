"""jupyterhub_config.py for a non-helm JupyterHub running inside the origin cluster.

The hub runs as a pod with the service account that hub_config/rbac.yaml binds (``hub`` in
``jhub``), behind a Service named ``hub`` (port 8081 for the hub, 8082 for the gpuburst service
that ``install(c)`` registers: the proxy routes /services/gpuburst/ there, and user servers call
its GPU kernel API there directly), so the spawner talks to the API server
with in-cluster credentials; its container sets ``GPUBURST_HUB_POD_IP`` from the downward API
(``valueFrom: {fieldRef: {fieldPath: status.podIP}}``), the address servers reach it at from
every site (``hub_connect_url`` below). The same settings as hub_config/values.yaml, written out for
``jupyterhub -f``:

    kubectl create namespace jhub-users && kubectl apply -f hub_config/rbac.yaml
    gpuburst doctor -n jhub-users --as system:serviceaccount:jhub:hub
    jupyterhub -f hub_config/jupyterhub_config.py

As with z2jh, the proxy is JupyterHub's configurable-http-proxy running as its own pod (the hub
image has no Node): run ``quay.io/jupyterhub/configurable-http-proxy`` with
``--default-target=http://hub:8081 --error-target=http://hub:8081/hub/error`` (in ``jhub``, where ``hub``
is the hub's Service),
its API on port 8001 behind a Service named ``proxy-api``, and the same ``CONFIGPROXY_AUTH_TOKEN``
in both pods.

Values that differ per site come from the environment, so this file can be used unchanged.
"""

import os

from jupyter_gpuburst.hub import install

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

NAMESPACE = os.environ.get("GPUBURST_NAMESPACE", "jhub")
# user servers and GPU kernels: never the hub's namespace, whose Secrets Liqo would reflect to
# every donor once the namespace is offloaded (docs/security.md, "Kernel keys and Liqo")
USER_NAMESPACE = os.environ.get("GPUBURST_USER_NAMESPACE", "jhub-users")
IMAGE = os.environ.get("GPUBURST_SINGLEUSER_IMAGE", "registry.example.edu/jupyter-gpuburst/singleuser:0.2.0")

# ---- hub and proxy ---------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpuburst"
c.JupyterHub.hub_bind_url = "http://:8081"
# "hub" by its short name, resolved in each pod's own namespace: the proxy's (NAMESPACE) has the
# hub's Service; the user namespace has the Service the hub keeps there with its pod's IP
# (c.HubAddress, from $GPUBURST_HUB_POD_IP: set it from the downward API's status.podIP), and Liqo
# reflects that one under the same name into each donor's copy of the namespace, where
# hub.<NAMESPACE>.svc.cluster.local does not exist (docs/donors.md).
c.JupyterHub.hub_connect_url = "http://hub:8081"
# The proxy is its own pod; the hub only talks to its API (token from the environment).
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = f"http://proxy-api.{NAMESPACE}.svc.cluster.local:8001"
# Keep running user servers when the hub restarts; the placement is restored from its state.
c.JupyterHub.cleanup_servers = False
# Choose your authenticator; any JupyterHub authenticator works. Groups (for per-group donor
# caps and donor lists) come from it or from c.JupyterHub.load_groups.
# c.JupyterHub.authenticator_class = "generic-oauth"

# ---- where and how user servers run --------------------------------------------------------
c.KubeSpawner.namespace = USER_NAMESPACE
c.KubeSpawner.image = IMAGE
c.KubeSpawner.environment = {"JUPYTER_GPUBURST_BACKEND": "auto"}
c.KubeSpawner.start_timeout = 600  # a donor may pull the image first
# z2jh's default home volume: one claim per user in the cluster's default storage class
# (set c.KubeSpawner.storage_class = "liqo" for Liqo's class: it binds where the first server lands)
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "10Gi"
c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
c.KubeSpawner.pvc_name_template = "claim-{user_server}"
c.KubeSpawner.volumes = [{"name": "volume-{user_server}", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
c.KubeSpawner.volume_mounts = [{"name": "volume-{user_server}", "mountPath": "/home/jovyan"}]

c.KubeSpawner.profile_list = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "description": "2 CPUs, 8 GB memory, no GPU.",
        "default": True,
        "kubespawner_override": {"cpu_guarantee": 1, "cpu_limit": 2, "mem_guarantee": "4G", "mem_limit": "8G"},
    },
    {
        "display_name": "CPU server + GPU kernels on demand",
        "slug": "cpu-gpu-kernels",
        "description": "Your files stay here; each GPU kernel runs where a GPU is free.",
        "kubespawner_override": {"cpu_guarantee": 1, "cpu_limit": 2, "mem_guarantee": "4G", "mem_limit": "8G"},
    },
    {
        "display_name": "1 GPU",
        "slug": "gpu-1",
        "description": "One NVIDIA GPU, on campus when free, otherwise on a peered donor cluster.",
        "kubespawner_override": {
            "cpu_guarantee": 4,
            "cpu_limit": 8,
            "mem_guarantee": "24G",
            "mem_limit": "32G",
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
        },
    },
    {
        "display_name": "2 GPUs",
        "slug": "gpu-2",
        "description": "Two NVIDIA GPUs on one node, on campus when free, otherwise on a donor.",
        "kubespawner_override": {
            "cpu_guarantee": 8,
            "cpu_limit": 16,
            "mem_guarantee": "48G",
            "mem_limit": "64G",
            "extra_resource_limits": {"nvidia.com/gpu": "2"},
        },
    },
    {
        "display_name": "MIG slice (1g.10gb)",
        "slug": "mig-1g",
        "description": "A 1g.10gb slice of an A100/H100 (MIG), for small models and teaching.",
        "kubespawner_override": {
            "cpu_guarantee": 2,
            "cpu_limit": 4,
            "mem_guarantee": "12G",
            "mem_limit": "16G",
            "extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"},
        },
    },
]

# ---- placement policy (docs/configuration.md) ------------------------------------------------
c.GPUBurstSpawner.strategy = "local-first"
c.GPUBurstSpawner.donor_order = ["polito-hpc"]
c.GPUBurstSpawner.user_donor_cap = 2
c.GPUBurstSpawner.group_donor_caps = {"course-ml101": 8}
c.GPUBurstSpawner.max_redirects = 2
# Home volumes of the default class stay on the origin: on a donor, scratch space instead, and
# the student is told (pin-to-volume or shared otherwise; docs/install.md, "Storage")
c.GPUBurstSpawner.storage_policy = "scratch-on-donor"

# ---- kernel mode (docs/kernels.md) -------------------------------------------------------------
# who may start GPU kernels: the custom scope, and access to the gpuburst service that serves them
# (for a student whose server runs, from its next start)
c.JupyterHub.load_roles.append(
    {
        "name": "gpu-kernels",
        "description": "Start GPU kernels (kernel mode) from JupyterLab's launcher",
        "groups": ["course-ml101"],
        "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"],
    },
)
# a kernel's first start on a donor's node may pull the image first, as a server's may
c.GPUKernelSettings.start_timeout = 600
c.GPUKernelSettings.max_kernels_per_user = 2
# every profile but "CPU only" offers GPU kernels: a student who picked no GPU gets none (unset,
# every server would offer them, and "CPU only" would be the kernel-mode profile under a new name)
c.GPUKernelSettings.server_profiles = {"cpu-gpu-kernels": ["*"], "gpu-1": ["*"], "gpu-2": ["*"], "mig-1g": ["*"]}
# idle kernels, GPU kernels included, culled after an hour even with a tab open
c.KubeSpawner.args = [
    "--MappingKernelManager.cull_idle_timeout=3600",
    "--MappingKernelManager.cull_interval=300",
    "--MappingKernelManager.cull_connected=True",
    "--GPUBurstProvisioner.start_timeout=630",
]

# ---- the gpuburst service: last, so that it checks the profiles above at hub start ----------
install(c)  # admin capacity page and API, GPU kernel API (docs/kernels.md)
