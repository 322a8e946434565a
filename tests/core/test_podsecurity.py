"""Pod Security admission's namespace labels, and where the product sets them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.hub.kernels.donorspace import DonorNamespaces

DONOR_KERNELS = Path(__file__).resolve().parents[2] / "hub_config" / "donor-kernels.yaml"


def test_labels_name_each_mode_given_and_refuse_an_unknown_level():
    assert podsecurity.namespace_labels(warn="restricted", audit="baseline") == {
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "baseline",
    }
    with pytest.raises(ValueError, match="'strict' for enforce: not one of privileged, baseline, restricted"):
        podsecurity.namespace_labels(enforce="strict")


def test_a_donor_kernel_namespace_enforces_restricted_as_shipped_and_as_the_hub_makes_it():
    expected = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
    assert podsecurity.KERNEL_NAMESPACE_LABELS == expected
    shipped = next(d for d in yaml.safe_load_all(DONOR_KERNELS.read_text()) if d and d["kind"] == "Namespace")
    assert expected.items() <= shipped["metadata"]["labels"].items()


async def test_the_hub_creates_a_donor_kernel_namespace_with_restricted_enforced():
    made = []

    class Core:
        async def create_namespace(self, body):
            made.append(body)

    class Offloader:
        async def ensure(self, namespace, **kwargs):
            pass

    await DonorNamespaces(Core(), Offloader(), logging.getLogger("t")).ensure("users-kernels-donor-1", "donor-1")
    assert made[0]["metadata"] == {"name": "users-kernels-donor-1", "labels": podsecurity.KERNEL_NAMESPACE_LABELS}
