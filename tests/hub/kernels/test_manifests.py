"""Kernel pods and their Secrets: valid Kubernetes objects, pinned like servers, key kept out."""

from __future__ import annotations

import base64
import json

import kubernetes_validate
import pytest
from traitlets.config import Config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.kernels.files import KernelFiles, KernelFilesRequest, clean_notebook_dir, scratch, shared_storage
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, kernel_settings_from_config, parse_profile

K8S_VERSION = kubernetes_validate.latest_version()
KEY = "0123456789abcdef-secret-key"
ORIGIN = Placement("origin", None, "gpu-0", "nvidia.com/gpu", 1, "1 of 2 free on the origin")
DONOR = Placement("donor-1", "donor-1", None, "nvidia.com/mig-1g.10gb", 1, "origin busy; donor-1 has 3 free")
SERVER_POD = {"metadata": {"name": "jupyter-ann", "namespace": "jhub", "uid": "6f0c4d9e-0000-4000-8000-000000000001"}}


def pod_for(placement: Placement, files: KernelFiles | None = None) -> dict:
    settings = GPUKernelSettings()
    return manifests.kernel_pod(
        name="gpuburst-kernel-abc-1",
        namespace="jhub",
        record_id="abc",
        user="ann@uni.example",
        groups=["gpu-students"],
        server_name="",
        profile=parse_profile({"resource": placement.resource, "count": placement.count, "cpu": "2", "memory": "8Gi"}),
        placement=placement,
        attempts=1,
        image="jupyter/gpu:1",
        ports=settings.ports(),
        files=files or scratch(placement),
        note="a note",
        secret_name="gpuburst-kernel-abc-1",
        server_pod=SERVER_POD,
        grace_seconds=5,
    )


@pytest.mark.parametrize("placement", [ORIGIN, DONOR], ids=["origin", "donor"])
def test_kernel_pod_is_valid_and_pinned_like_a_server(placement):
    pod = pod_for(placement)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert pod["spec"]["affinity"] == {"nodeAffinity": placement.node_affinity()}
    assert pod["spec"]["tolerations"] == placement.tolerations()
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == placement.site
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {placement.resource: "1", "cpu": "2", "memory": "8Gi"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == SERVER_POD["metadata"]["uid"]
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_the_key_lives_only_in_the_secret():
    settings = GPUKernelSettings()
    secret = manifests.connection_secret("gpuburst-kernel-abc-1", "jhub", KEY, "hmac-sha256", settings.ports(), ORIGIN)
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    connection = json.loads(base64.b64decode(secret["data"][manifests.CONNECTION_KEY]))
    assert connection["key"] == KEY and connection["shell_port"] == 50000
    pod = pod_for(ORIGIN)
    assert KEY not in json.dumps(pod)
    (ref,) = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == manifests.CONNECTION_ENV]
    assert ref["valueFrom"]["secretKeyRef"] == {"name": "gpuburst-kernel-abc-1", "key": manifests.CONNECTION_KEY}


def test_a_policy_that_mounts_the_users_volume_starts_the_kernel_in_the_notebooks_directory():
    files = KernelFiles(
        working_dir="/home/jovyan/course/week1",
        volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}}],
        volume_mounts=[{"name": "home", "mountPath": "/home/jovyan"}],
    )
    pod = pod_for(ORIGIN, files)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    container = pod["spec"]["containers"][0]
    assert container["workingDir"] == "/home/jovyan/course/week1"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "claim-ann"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[manifests.FILES_ENV] == "volume" and env[manifests.SCRATCH_ENV] == ""


def test_scratch_space_says_so():
    files = scratch(DONOR)
    assert files.mode == "scratch" and "without your files" in files.note and "donor-1" in files.note


def server_pod_with_home() -> dict:
    return {
        **SERVER_POD,
        "spec": {
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}},
                {"name": "tokens", "secret": {"secretName": "not-for-kernels"}},
            ],
            "containers": [
                {
                    "name": "notebook",
                    "volumeMounts": [
                        {"name": "home", "mountPath": "/home/jovyan"},
                        {"name": "tokens", "mountPath": "/etc/tokens"},
                    ],
                }
            ],
        },
    }


def test_shared_storage_mounts_the_servers_claims_and_starts_in_the_notebooks_directory():
    files = shared_storage(KernelFilesRequest("ann", "", DONOR, "course/week1", server_pod_with_home()))
    assert files is not None and files.mode == "volume"
    assert files.working_dir == "/home/jovyan/course/week1"
    assert files.volumes == [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-ann"}}]
    assert files.volume_mounts == [{"name": "home", "mountPath": "/home/jovyan"}]  # never the server's secrets


def test_shared_storage_declines_a_server_without_claims():
    assert shared_storage(KernelFilesRequest("ann", "", DONOR, "", SERVER_POD)) is None


def test_kernels_mount_files_only_when_the_storage_policy_is_shared():
    shared = Config({"GPUBurstSpawner": {"storage_policy": "shared"}})
    assert kernel_settings_from_config(shared).files_policy is shared_storage
    pinned = Config({"GPUBurstSpawner": {"storage_policy": "pin-to-volume"}})
    assert kernel_settings_from_config(pinned).files_policy is None


@pytest.mark.parametrize(
    "raw, expected",
    [("course/week1", "course/week1"), ("../../etc", "etc"), ("/abs/dir", "abs/dir"), ("", ""), (None, ""), (".", "")],
)
def test_notebook_dir_never_leaves_the_servers_root(raw, expected):
    assert clean_notebook_dir(raw) == expected


def test_kernel_profiles_default_to_the_gpu_server_profiles():
    config = Config()
    config.KubeSpawner.profile_list = [
        {"display_name": "CPU", "slug": "cpu", "default": True},
        {"display_name": "1 GPU", "slug": "g1", "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}}},
        {"display_name": "1 GPU again", "slug": "g1b", "gpuburst": {"resource": "nvidia.com/gpu", "count": 1}},
        {"display_name": "MIG", "slug": "mig", "gpuburst": {"resource": "nvidia.com/mig-1g.10gb", "count": 1}},
    ]
    profiles = kernel_settings_from_config(config).kernel_profiles()
    assert {p.display_name for p in profiles.values()} == {"Python 3 (1 GPU)", "Python 3 (MIG 1g.10gb)"}


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"count": 0}, "at least 1"),
        ({"slug": "Bad Slug"}, "lowercase"),
        ({"gpus": 1}, "unknown key"),
        ({"allowed_sites": "origin"}, "list of site"),
    ],
)
def test_bad_kernel_profiles_are_refused_with_the_reason(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(raw)


def test_kernel_mode_rbac_is_valid_and_only_adds_secret_writes_pod_patches_and_policy_creates_in_the_namespace():
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[3] / "hub_config" / "rbac-kernels.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    # the kernels' Secrets, the patch that adopts a pre-started kernel (found on the real
    # control plane, tests/kube: without it every adoption is refused), and each kernel's own
    # NetworkPolicy (created only: its pod's garbage collection deletes it)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]},
    ]
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    # and it is exactly what `gpuburst doctor` checks for kernel mode
    from jupyter_gpuburst import doctor

    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {(p.group, p.resource, p.verb) for p in doctor.KERNEL_PERMISSIONS}
    assert all(p.namespaced for p in doctor.KERNEL_PERMISSIONS)
