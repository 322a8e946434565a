"""GPUBurstSpawner (``spawner_class = "gpuburst"``) and what only it uses: the spawn form and its
messages, the spawn's state across restarts, the pod's request, servers without a GPU."""

from jupyter_gpuburst.hub.spawner.spawner import GPUBurstSpawner, SpawnRefused

__all__ = ["GPUBurstSpawner", "SpawnRefused"]
