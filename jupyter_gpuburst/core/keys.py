"""The product's own label and annotation keys on the pods it creates."""

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
COMPONENT_LABEL = "component"
KERNEL_COMPONENT = "gpuburst-kernel"

# GPU idle culling: where a user's server reports when its GPUs (and its GPU kernels') were last
# busy, with its own token; the hub's reply carries the warnings the Lab panel shows.
ACTIVITY_URL_ENV = "JUPYTER_GPUBURST_ACTIVITY_URL"
ACTIVITY_API_PATH = "api/activity"
# what "busy" means for a GPU kernel's pod, sent with each usage_request (a fraction of 1)
BUSY_THRESHOLD_FIELD = "gpu_busy_threshold"
