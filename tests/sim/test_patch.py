"""PATCH flavours: strategic merge by patch merge key, JSON merge, JSON patch."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.patch import apply_patch

SMP = "application/strategic-merge-patch+json"

POD = {
    "metadata": {"name": "nb", "finalizers": ["a"], "labels": {"x": "1"}},
    "spec": {
        "containers": [
            {
                "name": "notebook",
                "image": "i:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 8888, "name": "notebook-port"}],
            },
            {"name": "sidecar", "image": "s:1"},
        ],
        "tolerations": [{"key": "k1", "operator": "Exists"}],
    },
}


def test_strategic_merge_by_key_and_directives():
    out = apply_patch(
        POD,
        {
            "metadata": {"finalizers": ["b"], "labels": {"x": None}},
            "spec": {
                "containers": [
                    {
                        "name": "notebook",
                        "env": [{"name": "B", "value": "3"}, {"name": "A", "$patch": "delete"}],
                        "ports": [{"containerPort": 9999}],
                    },
                    {"name": "sidecar", "$patch": "delete"},
                ],
                "tolerations": [{"key": "k2", "operator": "Exists"}],
                "$setElementOrder/containers": [{"name": "notebook"}],
            },
        },
        SMP,
    )
    nb = out["spec"]["containers"]
    assert [c["name"] for c in nb] == ["notebook"]
    assert nb[0]["env"] == [{"name": "B", "value": "3"}]
    assert [p["containerPort"] for p in nb[0]["ports"]] == [8888, 9999]
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["metadata"]["labels"] == {}
    # tolerations have no merge key in Kubernetes: the list is replaced
    assert out["spec"]["tolerations"] == [{"key": "k2", "operator": "Exists"}]
    assert POD["spec"]["containers"][0]["env"][0]["name"] == "A"  # the original is untouched


def test_strategic_replace_directive_and_primitive_delete():
    out = apply_patch(
        POD,
        {
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o:1"}]},
        },
        SMP,
    )
    assert out["metadata"]["finalizers"] == []
    assert out["spec"]["containers"] == [{"name": "only", "image": "o:1"}]


def test_merge_patch_replaces_lists():
    out = apply_patch(POD, {"spec": {"containers": [{"name": "new", "image": "n:1"}]}}, "application/merge-patch+json")
    assert out["spec"]["containers"] == [{"name": "new", "image": "n:1"}]


def test_json_patch_and_errors():
    out = apply_patch(POD, [{"op": "replace", "path": "/spec/containers/0/image", "value": "i:2"}], "application/json-patch+json")
    assert out["spec"]["containers"][0]["image"] == "i:2"
    with pytest.raises(ApiError) as err:
        apply_patch(POD, [{"op": "test", "path": "/metadata/name", "value": "other"}], "application/json-patch+json")
    assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        apply_patch(POD, {}, "application/yaml")
    assert err.value.code == 415
    with pytest.raises(ApiError) as err:
        apply_patch(POD, {"spec": {}}, SMP, custom=True)
    assert err.value.code == 415  # custom resources take no strategic merge, as in Kubernetes
