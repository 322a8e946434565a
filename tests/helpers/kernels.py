"""A hub with GPU kernels: its config lines, and the scopes a user needs to start GPU kernels."""

KERNEL_HUB = """
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.load_groups = {"gpu-students": {"users": ["alice", "bob"]}}
c.JupyterHub.load_roles.append({"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "groups": ["gpu-students"]})
c.GPUKernelSettings.reap_interval_seconds = 1
c.GPUKernelSettings.extra_env = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
"""
KERNEL_SCOPES = ["custom:gpuburst:kernels", "access:services!service=gpuburst"]
