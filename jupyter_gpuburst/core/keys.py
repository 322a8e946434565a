"""The contracts between our processes: labels, annotations, environment names and ports.

The hub writes them on the pods it creates (users' servers, kernel pods); the server extension,
the kernel provisioner and the kernel pod read them. Each is defined here once and imported by
both sides, so a rename cannot leave one side behind.
"""

GROUP = "gpuburst.jupyter.org"

SITE_LABEL = f"{GROUP}/site"
CLUSTER_LABEL = f"{GROUP}/cluster"
REASON_ANNOTATION = f"{GROUP}/reason"
# Usernames and group names are not valid label values in general, so the owner of a pod is
# kept in annotations; the inventory reads them to enforce per-user and per-group donor caps.
USER_ANNOTATION = f"{GROUP}/user"
GROUPS_ANNOTATION = f"{GROUP}/groups"
ATTEMPTS_ANNOTATION = f"{GROUP}/attempts"

ORIGIN_SITE = "origin"

# Kernel mode: a GPU kernel's pod is placed like a server but belongs to a kernel, so its
# reservation and placement are kept under the kernel's own key, never its server's.
KERNEL_ANNOTATION = f"{GROUP}/kernel"
SERVER_ANNOTATION = f"{GROUP}/server"
# a donor's GPU kernels run in a namespace of their own beside their server's:
# "<server namespace>-kernels-<donor's cluster id>" (hub/kernels/manifests.py says why)
KERNEL_NAMESPACE_INFIX = "-kernels-"
# the server's own id of the kernel (Jupyter's kernel id, which its URLs carry): a server starts
# an id again only once its earlier start failed or was shut down, so a new start of the same id
# replaces an earlier one still alive at the hub, one whose answer never reached the server
JUPYTER_KERNEL_ANNOTATION = f"{GROUP}/jupyter-kernel-id"
# the same id as a label: the kernel's own NetworkPolicy selects its pod by it
KERNEL_LABEL = f"{GROUP}/kernel"
COMPONENT_LABEL = "component"
KERNEL_COMPONENT = "gpuburst-kernel"

# Warm pools (hub/pools): placeholder pods that hold a site's capacity and pull a profile's image
# for the next spawns. The placement inventory counts a pod with POOL_LABEL as free capacity
# only in the pools' own namespace (the label is anyone's to set).
POOL_LABEL = f"{GROUP}/pool"  # the pool's name, "<site>.<profile>"
POOL_SITE_LABEL = f"{GROUP}/pool-site"
POOL_PROFILE_LABEL = f"{GROUP}/pool-profile"
POOL_COMPONENT = "gpuburst-warm-pool"
# A pool of pre-started GPU kernels: kernel pods that wait, imports done, for their connection.
# POOL_KIND_LABEL tells them from placeholders; an adopted one keeps PRESTARTED_ANNOTATION (the
# pool it came from), and reads what its adopter sends from a Secret volume at
# KERNEL_CONNECTION_DIR_ENV: the connection (with the adopter's key) and the adopter's env.
POOL_KIND_LABEL = f"{GROUP}/pool-kind"
POOL_KIND_KERNEL = "kernel"
PRESTARTED_ANNOTATION = f"{GROUP}/prestarted"
# Bumped on an adopted donor kernel's pod a few seconds after its adoption: an update that makes
# the donor's kubelet sync the pod again, in case Liqo brought it the adoption before the Secret.
VOLUME_SYNC_ANNOTATION = f"{GROUP}/volume-sync"

# The release of the hub that created a server's or a kernel's pod (images are tagged alike):
# `gpuburst doctor` warns about pods of another release than its own after an upgrade.
VERSION_LABEL = f"{GROUP}/version"
# The image a warm pool's pod was made to run (the hub's pod cache keeps no image): a pool's pod
# of another release or image than its pool makes now is drained, never adopted (hub/pools/stale.py).
POOL_IMAGE_ANNOTATION = f"{GROUP}/pool-image"

# ---- environment of a user's server and of a kernel pod (the hub sets, the pod reads) ------
ENV_PREFIX = "JUPYTER_GPUBURST_"
# where the pod runs: the placement decision, for the server extension and the Lab panel
SITE_ENV = f"{ENV_PREFIX}SITE"
CLUSTER_ENV = f"{ENV_PREFIX}CLUSTER"
REASON_ENV = f"{ENV_PREFIX}REASON"
NODE_ENV = f"{ENV_PREFIX}NODE"
GPU_RESOURCE_ENV = f"{ENV_PREFIX}GPU_RESOURCE"
GPU_COUNT_ENV = f"{ENV_PREFIX}GPU_COUNT"
# what the server got for storage under the hub's storage policy
STORAGE_ENV = f"{ENV_PREFIX}STORAGE"
STORAGE_MESSAGE_ENV = f"{ENV_PREFIX}STORAGE_MESSAGE"
# where a user's server reaches the hub's GPU kernel API (with its own $JUPYTERHUB_API_TOKEN)
KERNELS_URL_ENV = f"{ENV_PREFIX}KERNELS_URL"
# how GPUs are read: "auto" (NVML when it finds a GPU), "nvml", "simulated" or "none"
BACKEND_ENV = f"{ENV_PREFIX}BACKEND"
SIM_GPUS_ENV = f"{ENV_PREFIX}SIM_GPUS"
SIM_MODEL_ENV = f"{ENV_PREFIX}SIM_MODEL"
# a kernel pod's own: its connection (keys and ports), note, files and scratch, and kernel id
KERNEL_CONNECTION_ENV = f"{ENV_PREFIX}KERNEL_CONNECTION"
KERNEL_NOTE_ENV = f"{ENV_PREFIX}KERNEL_NOTE"
KERNEL_FILES_ENV = f"{ENV_PREFIX}KERNEL_FILES"
KERNEL_SCRATCH_ENV = f"{ENV_PREFIX}KERNEL_SCRATCH"
KERNEL_ID_ENV = f"{ENV_PREFIX}KERNEL_ID"
KERNEL_CONNECTION_DIR_ENV = f"{ENV_PREFIX}KERNEL_CONNECTION_DIR"
KERNEL_PRELOAD_ENV = f"{ENV_PREFIX}KERNEL_PRELOAD"  # modules a pre-started kernel imports early
KERNEL_POD_IP_ENV = f"{ENV_PREFIX}KERNEL_POD_IP"  # a pre-started kernel binds its pod's IP (downward API)
# a pre-started kernel answers its readiness probe on this port (its hb port) while it waits,
# so its pod is Ready when its imports are done, and an adopted one is Ready at once
KERNEL_READY_PORT_ENV = f"{ENV_PREFIX}KERNEL_READY_PORT"
KERNEL_CONNECTION_FILE = "connection.json"
KERNEL_ADOPTER_FILE = "adopter.json"  # {"env": {...}}: what the adopter's kernel needs in its env
# a kernel pod's five ports, profile and files mode, for a hub that starts again (its pod cache
# keeps no container ports, and the registry rebuilds its records from the pods)
PORTS_ANNOTATION = f"{GROUP}/ports"
PROFILE_ANNOTATION = f"{GROUP}/profile"
FILES_ANNOTATION = f"{GROUP}/files"

# ---- the gpuburst service in the hub pod (z2jh's values expose it on the hub Service) --------
SERVICE_PORT = 8082
SERVICE_HOST_ENV = "GPUBURST_SERVICE_HOST"
SERVICE_PORT_ENV = "GPUBURST_SERVICE_PORT"
# the hub pod's own IP (downward API: status.podIP), for the hub's address in the user namespace
HUB_POD_IP_ENV = "GPUBURST_HUB_POD_IP"

# GPU idle culling: where a user's server reports when its GPUs (and its GPU kernels') were last
# busy, with its own token; the hub's reply carries the warnings the Lab panel shows.
ACTIVITY_URL_ENV = f"{ENV_PREFIX}ACTIVITY_URL"
ACTIVITY_API_PATH = "api/activity"
# what "busy" means for a GPU kernel's pod, sent with each usage_request (a fraction of 1)
BUSY_THRESHOLD_FIELD = "gpu_busy_threshold"

# Kernelspecs of the hub's GPU kernel profiles are named with this prefix and the profile's
# slug; the lab extension tells a GPU kernel by it (labextension/src/kernelformat.ts)
KERNELSPEC_PREFIX = "gpuburst-"

# The devices a container may use, as the NVIDIA device plugin tells the container runtime
# (UUIDs, comma-separated; "all", "none", "void" too): the emulated kubelet sets them for a pod
# given real GPUs, and the NVML backend reads only the devices listed there.
NVIDIA_VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
