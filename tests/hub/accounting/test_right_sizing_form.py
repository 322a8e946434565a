"""The spawn form's right-sizing sentence, from the spawner's own profiles and the ledger's sessions."""

from __future__ import annotations

import pytest
from helpers.spawner import PROFILES, FakeCoreApi, make_spawner, make_tracker
from helpers.usage_hub import earlier_sessions
from traitlets.config import Config

from jupyter_gpuburst.hub.accounting import Accounting, GPUAccountingSettings
from jupyter_gpuburst.hub.accounting.ledger import UsageLedger
from jupyter_gpuburst.hub.accounting.store import UsageStore

SLICE = {"display_name": "MIG slice", "slug": "mig", "gpuburst": {"resource": "nvidia.com/mig-1g.10gb", "count": 1}}


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.setattr("kubespawner.spawner.load_config", lambda **kwargs: None)
    monkeypatch.setattr("kubespawner.spawner.shared_client", lambda *a, **k: FakeCoreApi())


def with_sessions(tracker, tmp_path, user: str, count: int) -> None:
    """``count`` earlier 2-GPU sessions of ``user`` that peaked at 5 GiB (helpers.usage_hub)."""
    earlier_sessions(tmp_path / "usage.sqlite", user, count)
    ledger = UsageLedger(UsageStore(tmp_path / "usage.sqlite"), tracker.inventory.pod_requests)
    tracker.accounting = Accounting(GPUAccountingSettings(config=Config()), ledger)


async def test_the_form_names_the_smallest_profile_that_would_have_fitted(no_cluster, tmp_path):
    tracker = make_tracker()
    spawner = make_spawner(tracker, profile_list=[*PROFILES, SLICE])
    with_sessions(tracker, tmp_path, spawner.user.name, 5)
    form = await spawner.options_form(spawner)
    sentence = "Your last 5 GPU sessions peaked at 5 GiB of GPU memory: a MIG 1g.10gb slice would do (&quot;MIG slice&quot;)."
    assert f'<p class="gpuburst-right-size" id="gpuburst-right-size">{sentence}</p>' in form
    assert form.index("gpuburst-right-size") < form.index('name="profile"')


async def test_too_few_sessions_or_no_smaller_profile_say_nothing(no_cluster, tmp_path):
    tracker = make_tracker()
    spawner = make_spawner(tracker, profile_list=[*PROFILES, SLICE])
    with_sessions(tracker, tmp_path, spawner.user.name, 4)
    assert "gpuburst-right-size" not in await spawner.options_form(spawner)
    # five sessions of 2 GPUs (80 GiB): where the form offers nothing smaller, nothing is said;
    # where its smallest is one GPU, that is named
    other = tmp_path / "other"
    other.mkdir()
    with_sessions(tracker, other, spawner.user.name, 5)
    only_big = make_spawner(tracker, profile_list=[p for p in PROFILES if p["slug"] in ("cpu", "gpu4")])
    assert "gpuburst-right-size" not in await only_big.options_form(only_big)
    whole = make_spawner(tracker, profile_list=PROFILES)
    assert "one GPU would do (&quot;1 GPU&quot;)" in await whole.options_form(whole)
