"""The real control plane: kube-apiserver, kube-scheduler, kube-controller-manager and etcd, built
from their Go modules by ``tools/kube/build`` (``make kube``) and run as local processes, one set
per site, with the same process kubelet that serves the emulator joining them as a node agent.
"""
