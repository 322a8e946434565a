"""Liqo facts: detection, pinning fragments, and NamespaceOffloading against Liqo's own CRD."""

from __future__ import annotations

import ast
from pathlib import Path

import jsonschema
import pytest
import yaml

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import liqo

PACKAGE = Path(liqo.__file__).parent.parent


@pytest.fixture(scope="module")
def offloading_schema(liqo_crd_dir):
    crd = yaml.safe_load((liqo_crd_dir / "offloading.liqo.io_namespaceoffloadings.yaml").read_text())
    assert crd["spec"]["group"] == liqo.OFFLOADING_GROUP
    assert crd["spec"]["names"]["kind"] == liqo.NAMESPACE_OFFLOADING_KIND
    assert crd["spec"]["names"]["plural"] == liqo.NAMESPACE_OFFLOADING_PLURAL
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == liqo.OFFLOADING_VERSION]
    return version["schema"]["openAPIV3Schema"]


def test_virtual_node_detection():
    virtual = synthetic.node("liqo-polito", {"nvidia.com/gpu": 16}, cluster_id="polito-hpc")
    plain = synthetic.node("gpu-0", {"nvidia.com/gpu": 8})
    assert liqo.is_virtual_node(virtual) and not liqo.is_virtual_node(plain)
    assert liqo.remote_cluster_id(virtual) == "polito-hpc"
    assert liqo.remote_cluster_id(plain) is None
    assert liqo.is_virtual_node_taint(virtual["spec"]["taints"][0])
    assert not liqo.is_virtual_node_taint({"key": "nvidia.com/gpu", "effect": "NoSchedule"})


def test_node_labelled_virtual_without_cluster_id_has_no_donor():
    node = synthetic.node("odd", {})
    node["metadata"]["labels"][liqo.TYPE_LABEL] = liqo.VIRTUAL_NODE_TYPE
    assert liqo.is_virtual_node(node) and liqo.remote_cluster_id(node) is None


@pytest.mark.parametrize("strategy", liqo.POD_OFFLOADING_STRATEGIES)
@pytest.mark.parametrize("cluster_ids", [None, ["donor-1"], ["b", "a", "a"]])
def test_namespace_offloading_validates_against_crd(offloading_schema, strategy, cluster_ids):
    manifest = liqo.namespace_offloading("jupyter", strategy=strategy, cluster_ids=cluster_ids)
    jsonschema.validate(manifest, offloading_schema)
    assert manifest["metadata"]["name"] == liqo.NAMESPACE_OFFLOADING_NAME
    assert manifest["spec"]["podOffloadingStrategy"] == strategy
    if cluster_ids:
        (term,) = manifest["spec"]["clusterSelector"]["nodeSelectorTerms"]
        ids = [e for e in term["matchExpressions"] if e["key"] == liqo.REMOTE_CLUSTER_ID_LABEL][0]["values"]
        assert ids == sorted(set(cluster_ids))


def test_schema_rejects_a_bad_strategy(offloading_schema):
    manifest = liqo.namespace_offloading("jupyter")
    manifest["spec"]["podOffloadingStrategy"] = "Everywhere"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, offloading_schema)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "Everywhere"}, "podOffloadingStrategy"),
        ({"namespace_mapping_strategy": "Random"}, "namespaceMappingStrategy"),
        ({"cluster_ids": []}, "at least one donor"),
    ],
)
def test_namespace_offloading_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        liqo.namespace_offloading("jupyter", **kwargs)


def test_donor_affinity_needs_cluster_id():
    with pytest.raises(ValueError):
        liqo.donor_node_affinity_term("")


def test_remote_namespace_name_follows_default_mapping():
    assert liqo.remote_namespace_name("jupyter", "origin-uni") == "jupyter-origin-uni"


def test_no_other_module_spells_a_liqo_key():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "core" / "liqo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "liqo.io" in node.value:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, f"liqo.io keys outside core/liqo.py: {offenders}"


@pytest.mark.parametrize("module", sorted(p.name for p in (PACKAGE / "core").glob("*.py")))
def test_core_modules_are_pure(module):
    """core/ is the pure part: no I/O, no Kubernetes or Jupyter imports, only siblings and stdlib."""
    tree = ast.parse((PACKAGE / "core" / module).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    forbidden = {
        "kubernetes",
        "kubernetes_asyncio",
        "kubespawner",
        "jupyterhub",
        "jupyter_server",
        "socket",
        "asyncio",
        "aiohttp",
        "tornado",
        "requests",
        "subprocess",
        "os",
        "io",
        "pathlib",
        "urllib",
        "http",
        "jupyter_gpuburst",
    }
    assert not imported & forbidden, imported & forbidden
