"""One node-selector matcher for the emulator's scheduler and for doctor, with kube-scheduler's
semantics (k8s.io/component-helpers nodeaffinity): terms ORed, requirements ANDed, and a term
with no requirement matching no node."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.core.nodeselector import matches_node_affinity, requirement_matches, selector_matches, term_matches
from jupyter_gpuburst.doctor import selects

LABELS = {"gpu": "a100", "zone": "east", "cores": "16"}


@pytest.mark.parametrize(
    "operator, values, expected",
    [
        ("In", ["a100", "h100"], True),
        ("In", ["h100"], False),
        ("NotIn", ["h100"], True),
        ("NotIn", ["a100"], False),
        ("Exists", [], True),
        ("DoesNotExist", [], False),
        ("Unknown", ["a100"], False),
    ],
)
def test_each_operator_reads_the_label_as_the_scheduler_does(operator, values, expected):
    assert requirement_matches({"key": "gpu", "operator": operator, "values": values}, LABELS) is expected


def test_gt_and_lt_compare_integers_and_refuse_what_is_not_one():
    assert requirement_matches({"key": "cores", "operator": "Gt", "values": ["8"]}, LABELS)
    assert not requirement_matches({"key": "cores", "operator": "Lt", "values": ["8"]}, LABELS)
    assert not requirement_matches({"key": "gpu", "operator": "Gt", "values": ["8"]}, LABELS)


def test_an_empty_term_matches_no_node():
    assert not term_matches({}, LABELS, "node-a")
    assert not term_matches({"matchExpressions": [], "matchFields": []}, LABELS, "node-a")
    # so a selector of only empty terms selects nothing, while one good term among them is enough
    assert not selector_matches({"nodeSelectorTerms": [{}]}, LABELS, "node-a")
    assert selector_matches({"nodeSelectorTerms": [{}, {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}, LABELS)


def test_match_fields_read_the_node_name():
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    assert term_matches(term, LABELS, "node-a")
    assert not term_matches(term, LABELS, "node-b")


def test_a_pod_needs_its_node_selector_and_one_required_term():
    node = {"metadata": {"name": "node-a", "labels": LABELS}}
    required = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["west"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["east"]}]},
        ]
    }
    pod = {
        "spec": {
            "nodeSelector": {"gpu": "a100"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
        }
    }
    assert matches_node_affinity(pod, node)
    assert not matches_node_affinity({"spec": {**pod["spec"], "nodeSelector": {"gpu": "h100"}}}, node)
    assert matches_node_affinity({"spec": {}}, node)  # no constraint: any node


def test_doctor_reads_an_offloading_cluster_selector_with_the_same_semantics():
    # no selector admits every donor (Liqo's default); an empty term inside one admits none
    assert selects(None, LABELS)
    assert selects({"nodeSelectorTerms": []}, LABELS)
    assert not selects({"nodeSelectorTerms": [{}]}, LABELS)
    assert not selects({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["west"]}]}]}, LABELS)
