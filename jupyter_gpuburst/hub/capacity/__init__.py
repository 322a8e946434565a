"""What the hub knows of its sites' capacity: the tracker (inventory, reservations, decisions),
the watches that keep it current, who owns each pod, and the admin's capacity report."""

from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker, kernel_key, server_key

__all__ = ["CapacityTracker", "kernel_key", "server_key"]
