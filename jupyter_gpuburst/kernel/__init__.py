"""What runs in a GPU kernel's pod: its entry point (``pod``) and the kernel's own GPU use (``gpu``).

The hub starts the pod (``jupyter_gpuburst.hub.kernels``); the user's server speaks to the kernel
as to any other (``jupyter_gpuburst.server.kernels``). Nothing here imports jupyter_server.
"""
