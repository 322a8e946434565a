"""Storage policy rules: where a user's volumes are, and what each policy makes of it."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.core.keys import ORIGIN_SITE
from jupyter_gpuburst.hub.sites import storage
from jupyter_gpuburst.hub.sites.storage import Claim, StorageKind, StoragePolicy

NODES = {"gpu-node-1": ORIGIN_SITE, "liqo-donor-1": "donor-1", "liqo-donor-2": "donor-2"}
site_of_node = NODES.get

ORIGIN_CLAIM = Claim("claim-alice", storage_class="standard", phase="Bound")
NEW_CLAIM = Claim("claim-alice", storage_class=None, phase=None)  # KubeSpawner will create it
LIQO_UNBOUND = Claim("claim-alice", storage_class="liqo", phase="Pending")
LIQO_ON_DONOR = Claim("claim-alice", storage_class="liqo", phase="Bound", selected_node="liqo-donor-1")
LIQO_ON_ORIGIN = Claim("claim-alice", storage_class="liqo", phase="Bound", selected_node="gpu-node-1")


@pytest.mark.parametrize(
    "claim, site",
    [
        (ORIGIN_CLAIM, ORIGIN_SITE),
        (NEW_CLAIM, ORIGIN_SITE),
        (LIQO_UNBOUND, None),
        (LIQO_ON_DONOR, "donor-1"),
        (LIQO_ON_ORIGIN, ORIGIN_SITE),
    ],
)
def test_a_claim_lives_where_liqo_semantics_put_it(claim, site):
    assert storage.claim_site(claim, site_of_node) == site


def test_pin_to_volume_pins_to_the_origin_and_says_why():
    constraint = storage.constrain("pin-to-volume", [ORIGIN_CLAIM], site_of_node)
    assert constraint.allowed_sites == (ORIGIN_SITE,)
    assert constraint.reason == "your home volume is on the origin; storage policy pins servers to it"


def test_pin_to_volume_follows_a_liqo_claim_to_its_donor():
    constraint = storage.constrain("pin-to-volume", [LIQO_ON_DONOR], site_of_node)
    assert constraint.allowed_sites == ("donor-1",)
    assert "donor-1" in constraint.reason


def test_an_unbound_liqo_claim_constrains_nothing_until_its_first_pod_lands():
    assert storage.constrain("pin-to-volume", [LIQO_UNBOUND], site_of_node).allowed_sites is None


@pytest.mark.parametrize("policy", ["shared", "scratch-on-donor"])
def test_shared_and_scratch_never_constrain_placement(policy):
    assert storage.constrain(policy, [ORIGIN_CLAIM], site_of_node).allowed_sites is None


def test_volumes_on_two_sites_leave_no_site():
    other = Claim("data", storage_class="liqo", phase="Bound", selected_node="liqo-donor-2")
    constraint = storage.constrain("pin-to-volume", [ORIGIN_CLAIM, other], site_of_node)
    assert constraint.allowed_sites == ()
    assert "different sites" in constraint.reason


def test_the_constraint_narrows_a_profiles_own_sites():
    pinned = storage.Constraint((ORIGIN_SITE,), "x")
    assert storage.combine(None, pinned) == (ORIGIN_SITE,)
    assert storage.combine(("donor-1", ORIGIN_SITE), pinned) == (ORIGIN_SITE,)
    assert storage.combine(("donor-1",), pinned) == ()
    assert storage.combine(("donor-1",), storage.Constraint()) == ("donor-1",)


def test_scratch_on_a_donor_tells_the_student_their_files_are_not_there():
    outcome = storage.outcome("scratch-on-donor", [ORIGIN_CLAIM], "donor-1", site_of_node)
    assert outcome.kind is StorageKind.SCRATCH
    assert outcome.scratch_claims == ("claim-alice",)
    assert "donor-1" in outcome.message and "the origin" in outcome.message and "lost" in outcome.message
    assert outcome.env() == {"JUPYTER_GPUBURST_STORAGE": "scratch", "JUPYTER_GPUBURST_STORAGE_MESSAGE": outcome.message}


def test_scratch_on_donor_mounts_the_home_where_it_is():
    assert storage.outcome("scratch-on-donor", [ORIGIN_CLAIM], ORIGIN_SITE, site_of_node).kind is StorageKind.HOME
    # a liqo claim not bound yet follows the pod, so it is mounted on the donor too
    assert storage.outcome("scratch-on-donor", [LIQO_UNBOUND], "donor-1", site_of_node).kind is StorageKind.HOME


def test_shared_is_mounted_everywhere_and_no_volume_is_said_plainly():
    assert storage.outcome("shared", [ORIGIN_CLAIM], "donor-1", site_of_node).kind is StorageKind.SHARED
    assert storage.outcome("pin-to-volume", [], "donor-1", site_of_node).kind is StorageKind.NONE


def test_pin_to_volume_refuses_an_outcome_away_from_the_volume():
    with pytest.raises(ValueError, match="pin-to-volume"):
        storage.outcome("pin-to-volume", [ORIGIN_CLAIM], "donor-1", site_of_node)


@pytest.mark.parametrize(
    "policy, claim, site, ok",
    [
        ("pin-to-volume", ORIGIN_CLAIM, "donor-1", False),
        ("pin-to-volume", ORIGIN_CLAIM, ORIGIN_SITE, True),
        ("scratch-on-donor", LIQO_ON_DONOR, "donor-1", True),
        ("scratch-on-donor", LIQO_ON_DONOR, "donor-2", False),
        ("shared", ORIGIN_CLAIM, "donor-2", True),
        ("pin-to-volume", LIQO_UNBOUND, "donor-2", True),
    ],
)
def test_a_kernel_pod_can_mount_the_home_volume_only_where_it_reaches(policy, claim, site, ok):
    assert storage.can_mount(policy, [claim], site, site_of_node) is ok


def test_scratch_replaces_only_the_claims_that_cannot_follow():
    volumes = [
        {"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
    ]
    out = storage.scratch_volumes(volumes, ("claim-alice",), dict)
    assert out == [{"name": "home", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}]
    assert storage.claim_names(volumes) == ["claim-alice"]


def test_a_claim_object_reads_class_phase_and_selected_node():
    pvc = {
        "metadata": {"name": "claim-bob", "annotations": {storage.SELECTED_NODE_ANNOTATION: "liqo-donor-2"}},
        "spec": {"storageClassName": "liqo"},
        "status": {"phase": "Bound"},
    }
    claim = Claim.from_object(pvc)
    assert claim == Claim("claim-bob", "liqo", "Bound", "liqo-donor-2")
    assert storage.claim_site(claim, site_of_node) == "donor-2"


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError):
        storage.constrain("mirror", [ORIGIN_CLAIM], site_of_node)
    assert [p.value for p in StoragePolicy] == ["shared", "pin-to-volume", "scratch-on-donor"]
