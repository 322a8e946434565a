"""Remote GPU kernels as the user's server sees them.

The ``gpuburst`` kernel provisioner (``provisioner``), the kernelspecs of the hub's GPU kernel
profiles (``specs``), each kernel's GPU use asked of the kernel itself (``usage``), and
``/api/gpuburst/kernels`` for the panel (``handlers``).
"""
