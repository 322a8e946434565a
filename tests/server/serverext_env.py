"""Constants shared by the server extension tests and their conftest."""

SECRET = "hub-token-that-must-never-leak-4f1c9a"
GPUBURST_ENV = (
    "JUPYTER_GPUBURST_SITE",
    "JUPYTER_GPUBURST_CLUSTER",
    "JUPYTER_GPUBURST_REASON",
    "JUPYTER_GPUBURST_NODE",
    "JUPYTER_GPUBURST_GPU_RESOURCE",
    "JUPYTER_GPUBURST_GPU_COUNT",
    "JUPYTER_GPUBURST_BACKEND",
    "JUPYTER_GPUBURST_SIM_GPUS",
    "JUPYTER_GPUBURST_SIM_MODEL",
)
# a server the hub placed on a donor, as its pod's environment says
DONOR_ENV = {
    "JUPYTER_GPUBURST_SITE": "polito-hpc",
    "JUPYTER_GPUBURST_CLUSTER": "c0ffee-0000-4a4a",
    "JUPYTER_GPUBURST_REASON": "all 8 local A100s busy; 3 of 16 free on donor polito-hpc",
    "JUPYTER_GPUBURST_NODE": "liqo-polito-hpc",
    "JUPYTER_GPUBURST_GPU_RESOURCE": "nvidia.com/gpu",
    "JUPYTER_GPUBURST_GPU_COUNT": "2",
}
