"""GPUBurstSpawner (``spawner_class = "gpuburst"``) and what only it uses: the spawn form and its
messages, the spawn's state across restarts, the pod's request, servers without a GPU."""

from jupyter_gpuburst.core import lazy

__all__ = ["GPUBurstSpawner", "SpawnRefused"]
# the spawner imports the hub's service, whose pools read this package's pod request: a module
# of this package is imported without the spawner (and without that cycle)
__getattr__ = lazy.exports(__name__, dict.fromkeys(__all__, "spawner"))
