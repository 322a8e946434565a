"""GPUBurstSpawner: KubeSpawner that places GPU servers locally or on a Liqo donor."""

from kubespawner import KubeSpawner


class GPUBurstSpawner(KubeSpawner):
    """Placeholder until the spawner lands: behaves exactly like KubeSpawner."""
