"""hub_config/: every manifest validates against the real schemas, and the files agree.

z2jh's schema and default values of the pinned chart release are vendored in tests/reference/z2jh
(see its PROVENANCE); the
values snippet is merged over the chart defaults and validated the way `helm install` does.
"""

from __future__ import annotations

import copy
import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes.utils.quantity import parse_quantity
from traitlets.config.loader import PyFileConfigLoader

from hub_config.readme import command, guide_commands
from jupyter_gpuburst import doctor
from jupyter_gpuburst.core import liqo

REPO = Path(__file__).resolve().parents[2]

HUB_CONFIG = REPO / "hub_config"
Z2JH = REPO / "tests" / "reference" / "z2jh"
K8S_VERSION = kubernetes_validate.latest_version()


def load_all(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((HUB_CONFIG / name).read_text()) if doc]


def merge(base: Any, overlay: Any) -> Any:
    """Helm's values merge: maps merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            out[key] = merge(base.get(key), value) if key in base else value
        return out
    return copy.deepcopy(overlay)


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load((HUB_CONFIG / "values.yaml").read_text())


@pytest.fixture(scope="module")
def plain_config():
    return PyFileConfigLoader("jupyterhub_config.py", path=str(HUB_CONFIG)).load_config()


# ---- RBAC ------------------------------------------------------------------------------------
@pytest.mark.parametrize("doc", load_all("rbac.yaml"), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_rbac_validates_strictly(doc):
    # validate() raises on the first error and says which schema version it checked against
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == ".".join(K8S_VERSION.split(".")[:2])


def test_strict_validation_would_catch_a_typo():
    role = copy.deepcopy(next(d for d in load_all("rbac.yaml") if d["kind"] == "Role"))
    role["rules"][0]["verb"] = role["rules"][0].pop("verbs")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(role, K8S_VERSION, strict=True)


def granted(docs: list[dict[str, Any]]) -> set[tuple[bool, str, str, str]]:
    out = set()
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((doc["kind"] == "Role", group, resource, verb))
    return out


def test_rbac_grants_exactly_what_doctor_checks():
    """Least privilege: every rule is needed (doctor checks it) and nothing needed is missing."""
    needed = {(p.namespaced, p.group, p.resource, p.verb) for p in doctor.REQUIRED_PERMISSIONS}
    assert granted(load_all("rbac.yaml")) == needed


def test_rbac_has_no_wildcards_secrets_or_writes_outside_the_namespace():
    docs = load_all("rbac.yaml")
    for namespaced, group, resource, verb in granted(docs):
        assert "*" not in (group, resource, verb)
        assert resource != "secrets"
        if not namespaced:
            assert verb in ("get", "list", "watch"), (resource, verb)


def test_bindings_point_at_the_roles_and_the_hub_account():
    docs = load_all("rbac.yaml")
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in docs if d["kind"].endswith("Binding")]
    assert {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings} == roles
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]
        if binding["kind"] == "RoleBinding":
            assert binding["metadata"]["namespace"] == "jhub-users"  # the users', apart from the hub's


# ---- NamespaceOffloading ---------------------------------------------------------------------
def test_namespace_offloading_matches_liqo_crd_and_product(liqo_crd_dir):
    [doc] = load_all("namespace-offloading.yaml")
    crd = yaml.safe_load((liqo_crd_dir / "offloading.liqo.io_namespaceoffloadings.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == liqo.OFFLOADING_VERSION]
    jsonschema.validate(doc, version["schema"]["openAPIV3Schema"])
    assert doc == liqo.namespace_offloading("jhub-users")


# ---- z2jh values -----------------------------------------------------------------------------
def test_values_validate_against_z2jh_schema(values):
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    defaults = yaml.safe_load((Z2JH / "values.yaml").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(merge(defaults, values))] == []


def test_z2jh_schema_would_catch_a_misplaced_key(values):
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    defaults = yaml.safe_load((Z2JH / "values.yaml").read_text())
    broken = merge(values, {"singleuser": {"profile_list": values["singleuser"]["profileList"]}})
    with pytest.raises(jsonschema.ValidationError, match="profile_list"):
        jsonschema.validate(merge(defaults, broken), schema)


def test_values_profiles_cover_cpu_gpus_and_a_mig_slice(values):
    profiles = {p["slug"]: p for p in values["singleuser"]["profileList"]}
    assert set(profiles) == {"cpu", "cpu-gpu-kernels", "gpu-1", "gpu-2", "mig-1g"}
    limits = {slug: p["kubespawner_override"].get("extra_resource_limits", {}) for slug, p in profiles.items()}
    assert limits == {
        "cpu": {},
        "cpu-gpu-kernels": {},
        "gpu-1": {"nvidia.com/gpu": "1"},
        "gpu-2": {"nvidia.com/gpu": "2"},
        "mig-1g": {"nvidia.com/mig-1g.10gb": "1"},
    }
    inventory = doctor.new_inventory()
    assert all(inventory.tracks(r) for lim in limits.values() for r in lim)


def test_values_spawner_class_is_our_entry_point(values):
    name = values["hub"]["config"]["JupyterHub"]["spawner_class"]
    [ep] = [ep for ep in entry_points(group="jupyterhub.spawners") if ep.name == name]
    assert ep.value == "jupyter_gpuburst.hub.spawner:GPUBurstSpawner"


def test_values_extra_config_is_valid_python(values):
    extra = values["hub"]["extraConfig"]
    assert extra, "the chart's values install nothing into the hub"
    for name, source in extra.items():
        code = compile(source, f"hub.extraConfig.{name}", "exec")  # a SyntaxError names the entry
        assert code.co_names, f"hub.extraConfig.{name} does nothing"


def test_plain_config_matches_the_helm_values(values, plain_config):
    as_profiles = [{k: v for k, v in p.items()} for p in values["singleuser"]["profileList"]]
    assert plain_config.KubeSpawner.profile_list == as_profiles
    assert dict(plain_config.GPUBurstSpawner) == values["hub"]["config"]["GPUBurstSpawner"]
    assert plain_config.JupyterHub.spawner_class == "gpuburst"
    # install(c) ran: the capacity service is registered, at the host of hub_connect_url
    [service] = [s for s in plain_config.JupyterHub.services if s["name"] == "gpuburst"]
    assert service["url"] == "http://hub:8082"
    assert "extra_handlers" not in plain_config.JupyterHub


def test_plain_config_checks_its_profiles_at_hub_start(monkeypatch):
    """install(c) checks only the profiles already set: the file must call it after its list."""
    from jupyter_gpuburst.hub import installer

    checked = []
    monkeypatch.setattr(installer, "check_profiles", lambda profiles: checked.append([p["slug"] for p in profiles]))
    config = PyFileConfigLoader("jupyterhub_config.py", path=str(HUB_CONFIG)).load_config()
    assert checked == [[p["slug"] for p in config.KubeSpawner.profile_list]]


def test_configured_spawner_traits_exist(values):
    from jupyter_gpuburst.hub.spawner import GPUBurstSpawner

    if "strategy" not in GPUBurstSpawner.class_trait_names():
        pytest.skip("GPUBurstSpawner has no placement traits yet")
    from jupyter_gpuburst.hub.settings import GPUBurstSettings

    settings = GPUBurstSettings()
    for name, value in values["hub"]["config"]["GPUBurstSpawner"].items():
        assert name in GPUBurstSpawner.class_trait_names(config=True), name
        setattr(settings, name, value)  # validates like loading the config does
    settings.policy()  # and the policy accepts the combination


# ---- the README guide and the files it uses agree ---------------------------------------------
def test_readme_peers_once_and_grants_cpu_memory_and_gpus():
    peer = command("liqoctl peer")
    assert not any(line.startswith("liqoctl create resourceslice") for line in guide_commands())
    assert {"--cpu", "--memory", "--resource"} <= set(peer)
    guide = " ".join((REPO / "docs" / "install.md").read_text().split())
    assert "Liqo 1.0.2 or later" in guide


def grant() -> dict[str, float]:
    peer = command("liqoctl peer")
    value = {flag: peer[peer.index(flag) + 1] for flag in ("--cpu", "--memory", "--resource")}
    name, count = value["--resource"].split("=")
    return {"cpu": float(parse_quantity(value["--cpu"])), "memory": float(parse_quantity(value["--memory"])), name: float(count)}


@pytest.mark.parametrize("slug", ["gpu-1", "gpu-2"])
def test_profile_guarantees_fit_the_readme_grant(values, slug):
    """As many servers as the granted GPUs allow also fit in the granted CPU and memory."""
    [profile] = [p for p in values["singleuser"]["profileList"] if p["slug"] == slug]
    override = profile["kubespawner_override"]
    granted = grant()
    [(resource, per_server)] = override["extra_resource_limits"].items()
    servers = granted[resource] // int(per_server)
    assert servers >= 1
    # Kubernetes counts requests; without a guarantee KubeSpawner's limit becomes the request
    cpu = float(parse_quantity(str(override.get("cpu_guarantee", override["cpu_limit"]))))
    memory = float(parse_quantity(str(override.get("mem_guarantee", override["mem_limit"]))))
    assert servers * cpu <= granted["cpu"], f"{servers} x {slug} need {servers * cpu} CPUs"
    assert servers * memory <= granted["memory"], f"{servers} x {slug} need {servers * memory} bytes"


def test_readme_pins_the_chart_release_the_files_use(values):
    helm = command("helm upgrade --install")
    version = helm[helm.index("--version") + 1]
    assert command("helm repo add") == ["helm", "repo", "add", "jupyterhub", "https://hub.jupyter.org/helm-chart/"]
    assert f"--version {version}" in (HUB_CONFIG / "values.yaml").read_text()
    assert f"Tag:      {version} " in (Z2JH / "PROVENANCE").read_text()
    assert f"k8s-hub:{version}" in (HUB_CONFIG / "images" / "hub.Dockerfile").read_text()


def test_both_configs_reach_the_hub_from_donor_namespaces(values, plain_config):
    # the short name: the user namespace's Service "hub" (the hub keeps it from its pod's IP),
    # reflected by Liqo into each donor's namespace; hub.jhub.svc.cluster.local is the origin's only
    # (tests/sim/test_hub_address_names.py resolves both from a donor's pod)
    short_name = "http://hub:8081"
    assert values["hub"]["config"]["JupyterHub"]["hub_connect_url"] == short_name
    assert plain_config.JupyterHub.hub_connect_url == short_name
    assert values["hub"]["extraEnv"]["GPUBURST_HUB_POD_IP"] == {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert "GPUBURST_HUB_POD_IP" in (HUB_CONFIG / "jupyterhub_config.py").read_text()
    # z2jh's hub policy admits labelled pods of other namespaces (jhub-users) only with "accept"
    assert values["hub"]["networkPolicy"]["interNamespaceAccessLabels"] == "accept"
    # the proxy is its own pod (z2jh's too): the hub image has no Node to run one
    assert plain_config.ConfigurableHTTPProxy.should_start is False


def test_both_configs_give_every_user_a_home_volume_and_a_storage_policy(values, plain_config):
    assert values["singleuser"]["storage"]["type"] == "dynamic"
    assert plain_config.KubeSpawner.storage_pvc_ensure is True
    [volume] = plain_config.KubeSpawner.volumes
    assert volume["persistentVolumeClaim"]["claimName"] == "{pvc_name}"
    assert plain_config.GPUBurstSpawner.storage_policy == values["hub"]["config"]["GPUBurstSpawner"]["storage_policy"]


# ---- kernel mode, from the example values and the plain config ---------------------------------
def test_both_configs_grant_gpu_kernels_to_a_group_with_the_scopes_the_api_needs(values, plain_config):
    from jupyter_gpuburst.hub.kernels import server_token_scopes
    from jupyter_gpuburst.hub.service import SERVICE_NAME

    needed = {scope.removesuffix("!user") for scope in server_token_scopes(SERVICE_NAME)}
    [helm_role] = values["hub"]["loadRoles"].values()
    roles = plain_config.JupyterHub.load_roles
    roles = roles.get_value([]) if hasattr(roles, "get_value") else roles  # appended to, as it should be
    [plain_role] = [r for r in roles if r["name"] == "gpu-kernels"]
    for role in (helm_role, plain_role):
        assert set(role["scopes"]) == needed
        assert role["groups"] == ["course-ml101"]
    assert helm_role["description"] == plain_role["description"]


def test_both_configs_offer_gpu_kernels_with_resources_and_time_for_a_cold_pull(values, plain_config):
    from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config
    from jupyter_gpuburst.server.kernels.provisioner import GPUBurstProvisioner

    helm = values["hub"]["config"]["GPUKernelSettings"]
    assert dict(plain_config.GPUKernelSettings) == helm
    server_timeout = values["singleuser"]["startTimeout"]
    assert server_timeout == plain_config.KubeSpawner.start_timeout == 600
    # a kernel may wait as long as a server; the user's server waits longer, for the hub's reason
    assert helm["start_timeout"] >= server_timeout
    extra_file = values["singleuser"]["extraFiles"]["gpuburst-kernels"]
    server_config = extra_file["data"]
    # where every jupyter_server reads its conf.d (a system config directory of jupyter_core)
    from jupyter_core.paths import SYSTEM_CONFIG_PATH

    config_dir, _, filename = extra_file["mountPath"].rpartition("/jupyter_server_config.d/")
    assert config_dir in SYSTEM_CONFIG_PATH and filename.endswith(".json")
    assert server_config["GPUBurstProvisioner"]["start_timeout"] > helm["start_timeout"]
    # the defaults say the same, for a config that sets neither
    assert GPUBurstProvisioner.start_timeout.default_value > kernel_settings_from_config(None).start_timeout >= 600
    # idle kernels are culled, even with a browser tab open
    culling = server_config["MappingKernelManager"]
    assert culling["cull_idle_timeout"] > 0 and culling["cull_connected"] is True
    args = {a.split("=")[0].lstrip("-"): a.split("=")[1] for a in plain_config.KubeSpawner.args}
    assert {k.removeprefix("MappingKernelManager."): v for k, v in args.items() if k.startswith("MappingKernelManager.")} == {
        k: str(v) for k, v in culling.items()
    }
    assert float(args["GPUBurstProvisioner.start_timeout"]) == server_config["GPUBurstProvisioner"]["start_timeout"]
    # kernel profiles derived from the GPU profiles, each with its server profile's CPU and memory
    profiles = kernel_settings_from_config(plain_config).kernel_profiles()
    assert {(p.resource, p.count) for p in profiles.values()} == {
        ("nvidia.com/gpu", 1),
        ("nvidia.com/gpu", 2),
        ("nvidia.com/mig-1g.10gb", 1),
    }
    assert all(p.cpu and p.memory and p.cpu_limit and p.memory_limit for p in profiles.values())


def test_the_kernel_docs_quote_the_plain_config_as_it_is():
    import re

    text = (REPO / "docs" / "kernels.md").read_text()
    section = text[text.index("## Without helm") : text.index("## Who may start them")]
    [block] = re.findall(r"```python\n(.*?)```", section, re.S)
    assert block in (HUB_CONFIG / "jupyterhub_config.py").read_text()


def test_both_configs_offer_gpu_kernels_on_the_kernel_mode_profile_and_none_on_cpu_only(values, plain_config):
    from traitlets.config import Config

    from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config

    helm = Config(values["hub"]["config"])
    helm.KubeSpawner.profile_list = values["singleuser"]["profileList"]  # z2jh's singleuser.profileList
    for config in (helm, plain_config):
        settings = kernel_settings_from_config(config)
        kernels = set(settings.kernel_profiles())
        offered = {p["slug"]: settings.offered_by(p["slug"]) for p in config.KubeSpawner.profile_list}
        assert offered["cpu"] == frozenset(), "CPU only offers no GPU kernels"
        assert offered["cpu-gpu-kernels"] is None and kernels, "the kernel-mode profile offers every GPU kernel"
        # any other profile named in server_profiles exists: a typo would silently offer none
        assert set(settings.server_profiles) <= set(offered)
