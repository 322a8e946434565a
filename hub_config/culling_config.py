"""GPU idle culling for a 500-student GPU course: a worked example to load from jupyterhub_config.py.

    load_subconfig("/etc/jupyterhub/culling_config.py")

before or after ``install(c)`` (the hub is the same either way: the culler starts where
``c.GPUCullingSettings`` is set, read when the hub starts), or copy the lines below into your
own config. docs/culling.md explains each choice.
"""

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

# Off by default: turn it on for GPUs only. CPU servers are JupyterHub's idle culler's business.
c.GPUCullingSettings.enabled = True
# A GPU under 5 % utilization with no cell running is idle; an hour of that and it goes back.
c.GPUCullingSettings.threshold = 0.05
c.GPUCullingSettings.timeout_seconds = 3600
# A donor lends its GPUs: give those back after 30 minutes.
c.GPUCullingSettings.donor_timeout_seconds = 1800
# The Lab panel and the status bar warn 10 minutes before; Keep counts as GPU activity, 3 times.
c.GPUCullingSettings.warning_seconds = 600
c.GPUCullingSettings.keep_limit = 3
# No server or kernel holds a GPU longer than a lab day, busy or not.
c.GPUCullingSettings.max_age_seconds = 12 * 3600
# Teaching staff prepare material overnight: never culled.
c.GPUCullingSettings.exempt_groups = ["instructors"]
# One sweep a minute: a stop lands within a minute of its timeout.
c.GPUCullingSettings.period_seconds = 60

# Per server profile (slugs of c.KubeSpawner.profile_list): two GPUs are scarcer, so 30 min.
c.GPUCullingSettings.server_profiles = {
    "gpu-2": {"timeout_seconds": 1800},
    "cpu": {"enabled": False},
}
# Per GPU kernel profile (slugs of c.GPUKernelSettings.profiles): a GPU kernel idle in an open
# notebook gives its GPU back after 20 minutes; the notebook's server stays.
c.GPUCullingSettings.kernel_profiles = {
    "gpu-1": {"timeout_seconds": 1200, "warning_seconds": 300},
}
