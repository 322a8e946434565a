"""What running a pod on a site takes, for servers and kernels alike: the namespace offloaded to
a donor through Liqo (``offloading``), storage the site can reach (``storage``), and whether the
scheduler's refusal means the site is short (``unschedulable``)."""
