"""Server-side printing: ages, pod status wording, CRD printer columns."""

from __future__ import annotations

from jupyter_gpuburst.sim.resources import RESOURCES
from jupyter_gpuburst.sim.tables import human_duration, json_path, table


def test_human_duration_matches_apimachinery():
    assert [human_duration(s) for s in (5, 119, 150, 600, 7200, 9 * 3600, 3 * 86400 + 3600, 400 * 86400)] == [
        "5s",
        "119s",
        "2m30s",
        "10m",
        "120m",
        "9h",
        "3d1h",
        "400d",
    ]


def test_json_path_filters_conditions():
    vnode = {"status": {"conditions": [{"type": "Node", "status": "Ready"}, {"type": "VirtualKubelet", "status": "Creating"}]}}
    assert json_path(vnode, '.status.conditions[?(@.type=="VirtualKubelet")].status') == "Creating"
    assert json_path(vnode, ".spec.clusterID") is None


def test_pod_rows_show_terminating_and_ready():
    pod = {
        "metadata": {
            "name": "nb",
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:00Z",
        },
        "spec": {"containers": [{"name": "notebook"}], "nodeName": "gpu-1"},
        "status": {"phase": "Running", "podIP": "127.0.1.2", "containerStatuses": [{"name": "notebook", "ready": True, "restartCount": 2}]},
    }
    out = table(RESOURCES["pods"], [pod], "9")
    assert [c["name"] for c in out["columnDefinitions"][:5]] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert out["rows"][0]["cells"][:4] == ["nb", "1/1", "Terminating", 2]
    assert out["rows"][0]["cells"][5:7] == ["127.0.1.2", "gpu-1"]
    assert out["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
