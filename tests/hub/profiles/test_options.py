"""user_options hygiene and reading the GPU request out of a profile."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.hub.profiles.options import (
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
            "image": {
                "display_name": "Image",
                "choices": {"base": {"display_name": "Base", "default": True}},
                "unlisted_choice": {
                    "enabled": True,
                    "display_name_in_choices": "Other...",
                    "validation_regex": "^jupyter/.+:.+$",
                    "validation_message": "an image from jupyter/ with a tag",
                },
            },
        },
    },
]


def refusal(options) -> str | None:
    """Why ``options`` are refused for PROFILES, or None when they are accepted."""
    try:
        validate_user_options(options, PROFILES)
    except UserOptionsError as exc:
        return exc.message
    return None


def is_gpu(resource: str) -> bool:
    return resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-")


@pytest.mark.parametrize(
    "options",
    [None, {}, {"profile": "cpu"}, {"profile": "gpu", "flavour": "jax"}, {"profile": "gpu", "tag--unlisted-choice": "x"}, {"profile": ""}],
)
def test_offered_choices_are_accepted(options):
    assert refusal(options) is None


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
        ({"profile": "gpu", "flavour--unlisted-choice": "tf"}, "takes no unlisted choice"),
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


# ---- unlisted choices and validation_regex, as KubeSpawner 7 ----------------------------------


@pytest.mark.parametrize(
    "options",
    [
        # what KubeSpawner's form sends when "Other..." is picked and a value typed
        {"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": "jupyter/scipy-notebook:2024-01-01"},
        # REST API: the unlisted value alone
        {"profile": "gpu", "image--unlisted-choice": "jupyter/base-notebook:latest"},
        # an empty free-form field leaves the listed choice in charge
        {"profile": "gpu", "image": "base", "image--unlisted-choice": ""},
    ],
)
def test_unlisted_choices_are_accepted_like_kubespawner(options):
    assert refusal(options) is None


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": "evil/miner:1"}, "an image from jupyter/ with a tag"),
        ({"profile": "gpu", "image--unlisted-choice": "jupyter/no-tag"}, "is not allowed for option 'image'"),
        ({"profile": "gpu", "image": "unlisted-choice"}, "'Other...' was chosen without a value"),
        ({"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": ""}, "without a value"),
        ({"profile": "gpu", "image--unlisted-choice": ["jupyter/a:b"]}, "must be a string"),
        ({"profile": "gpu", "flavour": "unlisted-choice"}, "unknown choice 'unlisted-choice'"),
    ],
)
def test_unlisted_choices_are_refused_like_kubespawner(options, needle):
    with pytest.raises(UserOptionsError) as info:
        validate_user_options(options, PROFILES)
    assert needle in str(info.value)


def test_regex_is_checked_with_kubespawner_itself(monkeypatch):
    """The same options through KubeSpawner's own validator give the same verdict."""
    from kubespawner import KubeSpawner

    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kwargs: None)
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *a, **k: None)
    spawner = KubeSpawner(_mock=True)
    profiles = spawner._get_initialized_profile_list(PROFILES)
    for value, ok in (("jupyter/a:b", True), ("evil/a:b", False), ("jupyter/a", False)):
        options = {"profile": "gpu", "image--unlisted-choice": value}
        spawner.user_options = options
        try:
            spawner._validate_user_options(profiles)
            theirs = True
        except ValueError:
            theirs = False
        try:
            validate_user_options(options, profiles)
            ours = True
        except UserOptionsError:
            ours = False
        assert ours == theirs == ok, value


@pytest.mark.parametrize(
    "options",
    [
        {"profile": "x" * 1_000_000},
        {"profile": "gpu", "flavour": "y" * 1_000_000},
        {"profile": "gpu", "image--unlisted-choice": "z" * 1_000_000},
        {"profile": "gpu", "k" * 1_000_000: "v"},
        {"profile": "gpu", "node" + "n" * 1_000_000: "v"},
    ],
)
def test_echoed_input_is_truncated_in_the_error_and_the_log(options, caplog):
    import logging

    log = logging.getLogger("test.profiles")
    with caplog.at_level(logging.WARNING, logger="test.profiles"):
        with pytest.raises(UserOptionsError) as info:
            validate_user_options(options, PROFILES, log=log)
    message = str(info.value)
    assert len(message) < 400, len(message)
    assert "…" in message
    assert caplog.records and all(len(r.getMessage()) < 450 for r in caplog.records)
