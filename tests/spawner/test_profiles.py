"""user_options hygiene and reading the GPU request out of a profile."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.hub.profiles import (
    ProfileGPU,
    UserOptionsError,
    gpu_from_resources,
    profile_block,
    validate_user_options,
)

PROFILES = [
    {"slug": "cpu", "display_name": "CPU", "default": True},
    {
        "slug": "gpu",
        "display_name": "GPU",
        "profile_options": {
            "flavour": {
                "display_name": "Flavour",
                "choices": {"torch": {"display_name": "PyTorch"}, "jax": {"display_name": "JAX"}},
                "unlisted_choice": {"enabled": False},
            },
            "tag": {"display_name": "Tag", "choices": {"a": {}}, "unlisted_choice": {"enabled": True}},
        },
    },
]


def is_gpu(resource: str) -> bool:
    return resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-")


@pytest.mark.parametrize(
    "options",
    [None, {}, {"profile": "cpu"}, {"profile": "gpu", "flavour": "jax"}, {"profile": "gpu", "tag--unlisted-choice": "x"}, {"profile": ""}],
)
def test_offered_choices_are_accepted(options):
    validate_user_options(options, PROFILES)


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"profile": "gpu", "node_selector": {"a": "b"}}, "may not set 'node_selector'"),
        ({"profile": "gpu", "tolerations": []}, "may not set 'tolerations'"),
        ({"image": "evil"}, "may not set 'image'"),
        ({"profile": "gpu", "gpu_count": 8}, "may not set 'gpu_count'"),
        ({"profile": "gpu", "site": "donor-1"}, "may not set 'site'"),
        ({"profile": "gpu", "colour": "red"}, "unknown option(s) 'colour'"),
        ({"profile": "nope"}, "unknown profile 'nope'"),
        ({"profile": "gpu", "flavour": "tensorflow"}, "unknown choice 'tensorflow'"),
        ({"profile": "gpu", "flavour--unlisted-choice": "tf"}, "unknown option(s)"),
        ({"profile": "gpu", "flavour": ["torch"]}, "must be the slug of a choice"),
        ({"profile": 3}, "must be a profile slug"),
        (["profile"], "must be an object"),
    ],
)
def test_forged_options_are_refused_with_a_400(options, needle):
    with pytest.raises(UserOptionsError) as info:
        validate_user_options(options, PROFILES)
    assert info.value.status_code == 400
    assert needle in str(info.value)
    assert info.value.jupyterhub_message == str(info.value)


def test_options_without_profiles_are_refused():
    with pytest.raises(UserOptionsError, match="offers no profiles"):
        validate_user_options({"profile": "x"}, [])


def test_profile_block_reads_and_checks():
    assert profile_block({"slug": "p"}) is None
    block = profile_block({"slug": "p", "gpuburst": {"resource": "nvidia.com/mig-1g.10gb", "count": "2", "allowed_sites": ["origin"]}})
    assert block == ProfileGPU("nvidia.com/mig-1g.10gb", 2, ("origin",))
    assert profile_block({"slug": "p", "gpuburst": {}}) == ProfileGPU("nvidia.com/gpu", 1, None)
    with pytest.raises(ValueError, match="unknown key"):
        profile_block({"slug": "p", "gpuburst": {"cnt": 1}})
    with pytest.raises(ValueError, match="count"):
        profile_block({"slug": "p", "gpuburst": {"count": "1.5"}})
    with pytest.raises(ValueError, match="allowed_sites"):
        profile_block({"slug": "p", "gpuburst": {"allowed_sites": "origin"}})


def test_gpu_from_resources():
    assert gpu_from_resources({}, {}, is_gpu) is None
    assert gpu_from_resources({"cpu": "2"}, {"memory": "1G"}, is_gpu) is None
    assert gpu_from_resources({"nvidia.com/gpu": "2"}, {}, is_gpu) == ProfileGPU("nvidia.com/gpu", 2)
    # a guarantee larger than the limit is never under-counted
    assert gpu_from_resources({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 3}, is_gpu).count == 3
    assert gpu_from_resources({"nvidia.com/gpu": "0"}, {}, is_gpu) is None
    with pytest.raises(ValueError, match="one GPU resource"):
        gpu_from_resources({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}, {}, is_gpu)
