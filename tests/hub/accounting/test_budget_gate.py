"""A GPU-hour budget is shown on the spawn form, and a spawn over it is refused before placement."""

from __future__ import annotations

import json

import pytest
from helpers.spawner import FakeCoreApi, make_spawner, make_tracker, manifest_of
from traitlets.config import Config

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.accounting import Accounting, AccountingConfigError, GPUAccountingSettings
from jupyter_gpuburst.hub.accounting.gate import budget_state
from jupyter_gpuburst.hub.accounting.ledger import UsageLedger
from jupyter_gpuburst.hub.accounting.store import UsageStore
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.spawner import SpawnRefused

MONDAY = 1_795_000_000.0 - (1_795_000_000.0 % 86400) - 4 * 86400  # a UTC Monday 00:00 (1 Nov 2026 is a Sunday)


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kwargs: None)
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *a, **k: FakeCoreApi())


def with_budget(tracker, tmp_path, user: str, used_hours: float, budget: float = 1.0):
    config = Config()
    config.GPUAccountingSettings.user_budgets = {"*": budget}
    clock = [MONDAY + 3600]
    ledger = UsageLedger(UsageStore(tmp_path / "usage.sqlite"), tracker.inventory.pod_requests, clock=lambda: clock[0])
    tracker.accounting = Accounting(GPUAccountingSettings(config=config), ledger)
    pod = synthetic.pod("earlier", node_name="origin-gpu", gpus={"nvidia.com/gpu": 1}, site="origin", user=user)
    pod["metadata"]["annotations"][keys.GROUPS_ANNOTATION] = json.dumps([])
    unbound = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}}
    ledger.pod_event("ADDED", "jhub/earlier", unbound)
    ledger.pod_event("MODIFIED", "jhub/earlier", pod)
    clock[0] += used_hours * 3600
    ledger.pod_event("DELETED", "jhub/earlier", None)
    return tracker


async def test_the_form_says_what_is_left_and_when_it_resets(no_cluster, tmp_path):
    tracker = make_tracker()
    spawner = make_spawner(tracker)
    with_budget(tracker, tmp_path, spawner.user.name, used_hours=0.25)
    form = await spawner.options_form(spawner)
    assert "0.8 of 1 GPU-hours left this week, resets Monday 00:00 UTC." in form
    assert 'name="profile"' in form


async def test_a_spawn_over_budget_is_refused_before_placement(no_cluster, tmp_path):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    with_budget(tracker, tmp_path, spawner.user.name, used_hours=1.0)
    assert "Your GPU-hour budget is used up: 0 of 1 GPU-hours left this week" in await spawner.options_form(spawner)
    with pytest.raises(SpawnRefused) as refused:
        await manifest_of(spawner)
    assert refused.value.status_code == 403
    assert "0 of 1 GPU-hours left this week, resets Monday 00:00 UTC" in str(refused.value)
    assert len(tracker.placer.reservations) == 0  # nothing was held for it
    # a CPU server needs no GPU-hours
    cpu = make_spawner(tracker, {"profile": "cpu"})
    await manifest_of(cpu)


async def test_admins_are_exempt(no_cluster, tmp_path):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    with_budget(tracker, tmp_path, spawner.user.name, used_hours=5.0)
    spawner.user.admin = True
    manifest = await manifest_of(spawner)
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    assert "GPU-hour" not in await spawner.options_form(spawner)


def test_the_launcher_hears_the_same_sentence_and_whether_it_is_used_up(tmp_path):
    """What the hub's kernel API tells the GPU kernel launcher (hub/kernels/handlers.py)."""
    tracker = make_tracker()
    assert budget_state(tracker, "alice", []) == ("", False)  # no accounting, no budget
    with_budget(tracker, tmp_path, "alice", used_hours=0.25)
    assert budget_state(tracker, "alice", []) == ("0.8 of 1 GPU-hours left this week, resets Monday 00:00 UTC.", False)
    assert budget_state(tracker, "alice", [], admin=True) == ("", False)
    (tmp_path / "used").mkdir()
    used = with_budget(make_tracker(), tmp_path / "used", "alice", used_hours=1.0)
    sentence, used_up = budget_state(used, "alice", [])
    assert used_up and sentence.startswith("Your GPU-hour budget is used up: 0 of 1 GPU-hours left this week")


@pytest.mark.parametrize("budgets", [{"students": -1.0}, {"students": float("nan")}, {"students": float("inf")}])
def test_a_nonsense_budget_stops_the_hub_with_the_reason(budgets):
    config = Config()
    config.GPUAccountingSettings.group_budgets = budgets
    with pytest.raises(AccountingConfigError, match="group_budgets\\['students'\\] must be a number of GPU-hours"):
        GPUAccountingSettings(config=config)


def test_overlapping_semesters_are_refused():
    config = Config()
    config.GPUAccountingSettings.semesters = [
        {"name": "Fall", "start": "2026-09-01", "end": "2027-01-31"},
        {"name": "Spring", "start": "2027-01-15", "end": "2027-06-30"},
    ]
    with pytest.raises(AccountingConfigError, match="overlap"):
        GPUAccountingSettings(config=config)


def test_the_worked_example_in_hub_config_is_valid():
    from pathlib import Path

    config = Config()
    source = Path(__file__).resolve().parents[3] / "hub_config" / "accounting.py"
    exec(compile(source.read_text(), str(source), "exec"), {"get_config": lambda: config})
    settings = GPUAccountingSettings(config=config)
    assert settings.user_budgets == {"*": 20} and settings.group_budgets == {"ml101": 400}
    assert [s["name"] for s in settings.semesters] == ["Fall 2026", "Spring 2027"]
    assert settings.right_sizing_sessions == 5 and settings.right_sizing_small_share == 0.5
    # right-sizing's figures come from servers' reports: culling configured, and off
    assert GPUCullingSettings(config=config).enabled is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("right_sizing_sessions", -1),
        ("right_sizing_headroom", float("nan")),
        ("right_sizing_small_share", 2.0),
        ("right_sizing_days", -3.0),
    ],
)
def test_a_nonsense_right_sizing_setting_stops_the_hub_with_the_reason(name, value):
    config = Config()
    config.GPUAccountingSettings[name] = value
    with pytest.raises(AccountingConfigError, match=f"{name} must be from 0 to"):
        GPUAccountingSettings(config=config)
