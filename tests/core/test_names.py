"""The one vocabulary: friendly GPU resource names and site names."""

import pytest

from jupyter_gpuburst.core import names


@pytest.mark.parametrize(
    ("resource", "count", "expected"),
    [
        ("nvidia.com/gpu", 1, "1 GPU"),
        ("nvidia.com/gpu", 2, "2 GPUs"),
        ("nvidia.com/mig-1g.10gb", 1, "1 MIG 1g.10gb slice"),
        ("nvidia.com/mig-3g.40gb", 2, "2 MIG 3g.40gb slices"),
        ("example.com/fpga", 2, "2 example.com/fpga"),
    ],
)
def test_gpu_amount(resource: str, count: int, expected: str) -> None:
    assert names.gpu_amount(resource, count) == expected


def test_gpu_name_keeps_unknown_names_as_given() -> None:
    assert names.gpu_name("nvidia.com/gpu") == "GPU"
    assert names.gpu_name("nvidia.com/mig-1g.10gb") == "MIG 1g.10gb slice"
    assert names.gpu_name("nvidia.com/mig-weird") == "nvidia.com/mig-weird"


def test_sites_by_name() -> None:
    assert names.site_name("origin") == "the origin"
    assert names.site_name("donor-1") == "donor-1"
    assert names.plural(1, "GPU") == "1 GPU" and names.plural(3, "GPU") == "3 GPUs"


def test_simulated_models_answer_to_their_node_labels() -> None:
    from jupyter_gpuburst.gpu.simulated import MODELS, SimulatedBackend

    for model in MODELS.values():
        backend = SimulatedBackend(1, model.product_label)
        (reading,) = backend.read_devices([], 0.0)
        assert reading.name == model.name and reading.mig == model.mig
    h100 = SimulatedBackend(1, "NVIDIA-H100-80GB-HBM3").read_devices([], 0.0)[0]
    assert h100.memory_total_bytes == 81559 * 1024**2  # nvidia.com/gpu.memory of the demo's donor nodes
