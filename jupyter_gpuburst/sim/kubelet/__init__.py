"""The process kubelet (see ``pods``): pods of a cluster's non-virtual nodes as local processes.

Modules: ``network`` (pod IPs on loopback), ``runtime`` (argv, env, executable), ``volumes``
(volumes as directories and each container's view of them), ``mounts`` (volumes bound at their
mountPath in the container's mount namespace), ``servicenames`` (Service names in the pods'
hosts files), ``probes``, ``status`` (phase and conditions from container states), ``pods``
(the pod workers), with ``containers`` (a container's runs), ``lifecycle`` (its hooks, probes
and stop), ``processes`` (its processes on the host) and ``hostsfile``, ``exec`` (pods/exec
streams).
"""

from jupyter_gpuburst.sim.kubelet.network import AddressPool, container_ports
from jupyter_gpuburst.sim.kubelet.pods import Kubelet
from jupyter_gpuburst.sim.kubelet.runtime import container_argv, pod_env, resolve_command, resolve_field_ref

__all__ = ["AddressPool", "Kubelet", "container_argv", "container_ports", "pod_env", "resolve_command", "resolve_field_ref"]
