"""The culling rule and the signal store, without a hub: reports, replays, skew, silence, keeps."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.hub.culling.policy import decide, duration
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.culling.store import BOOTS_REMEMBERED, ReportError, SignalStore

NOW = 1_000_000.0


def settings(**kw) -> GPUCullingSettings:
    config = Config()
    for k, v in {"enabled": True, "timeout_seconds": 3600, "warning_seconds": 600, **kw}.items():
        config.GPUCullingSettings[k] = v
    return GPUCullingSettings(config=config)


def report(store: SignalStore, idle, seq=1, boot="b1", kernels=None, now=NOW, owns=lambda r, s: True, user="alice"):
    body = {"server_name": "", "boot": boot, "seq": seq, "gpu_idle_s": idle, "basis": "utilization", "kernels": kernels or {}}
    return store.report(user, body, owns, now)


def test_idle_is_measured_on_the_hubs_clock_whatever_the_pods_clock_says():
    store = SignalStore()
    # the pod's clock may be hours off: it sends an age, and the hub dates it on its own clock
    report(store, 120.0)
    signal = store.get("alice", "", "server")
    assert signal.idle_s(NOW) == 120.0
    assert signal.idle_s(NOW + 30) == 150.0


def test_a_replayed_or_reordered_report_is_refused_and_changes_nothing():
    store = SignalStore()
    report(store, 10.0, seq=5)
    with pytest.raises(ReportError) as refused:
        report(store, 9999.0, seq=5)
    assert refused.value.status == 409 and "replayed" in refused.value.message
    with pytest.raises(ReportError):
        report(store, 9999.0, seq=4)
    assert store.get("alice", "", "server").idle_s(NOW) == 10.0
    # a restarted server numbers from 1 again under a new boot id
    report(store, 1.0, seq=1, boot="b2")
    assert store.get("alice", "", "server").idle_s(NOW) == 1.0
    # and the earlier boot's recorded reports stay replays
    with pytest.raises(ReportError):
        report(store, 9999.0, seq=5)
    report(store, 2.0, seq=2, boot="b2")
    assert store.get("alice", "", "server").idle_s(NOW) == 2.0


def test_only_the_latest_boots_are_remembered():
    store = SignalStore()
    for n in range(BOOTS_REMEMBERED + 1):
        report(store, 1.0, seq=3, boot=f"b{n}")
    assert list(store.sequence[("alice", "")]) == [f"b{n}" for n in range(1, BOOTS_REMEMBERED + 1)]
    # the forgotten oldest boot is new again; a remembered one is not
    report(store, 1.0, seq=3, boot="b0")
    with pytest.raises(ReportError):
        report(store, 1.0, seq=3, boot=f"b{BOOTS_REMEMBERED}")


@pytest.mark.parametrize(
    "body",
    [
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": -5},
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": float("nan")},
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": "idle"},
        {"server_name": "", "boot": "b", "seq": -1, "gpu_idle_s": 1},
        {"server_name": "", "boot": "", "seq": 1, "gpu_idle_s": 1},
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": 1, "basis": "vibes"},
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": 1, "user": "bob"},
        {"server_name": "", "boot": "b", "seq": 1, "gpu_idle_s": 1, "kernels": {"k": {"idle_s": -1}}},
        ["not", "an", "object"],
    ],
)
def test_bad_reports_get_a_short_reason_and_store_nothing(body):
    store = SignalStore()
    with pytest.raises(ReportError) as refused:
        store.report("alice", body, lambda r, s: True, NOW)
    assert refused.value.status == 400 and len(refused.value.message) < 120
    assert store.signals == {} and store.sequence == {}


def test_kernels_of_another_server_or_user_are_ignored_not_stored():
    store = SignalStore()
    _, ignored = report(
        store, 1.0, kernels={"mine": {"idle_s": 5, "kernel_id": "k1"}, "bobs": {"idle_s": 5}}, owns=lambda r, s: r == "mine"
    )
    assert ignored == ["bobs"]
    assert store.get("alice", "", "mine") is not None and store.get("alice", "", "bobs") is None


def test_a_silent_server_is_unknown_never_idle_and_stopped_only_at_the_silence_limit():
    s = settings(timeout_seconds=60, silent_seconds=1800)
    store = SignalStore(stale_after_s=180)
    report(store, 59.0)
    signal = store.get("alice", "", "server")

    def at(t, **kw):
        policy = s.policy("server", "")
        return decide(signal, store.state(signal, t), policy, t, age_s=None, site_kind="origin", groups=frozenset(), **kw)

    # idle for 16 min, if it were still telling: unknown, and its silence is what counts
    assert store.state(signal, NOW + 1000) == "unknown"
    assert at(NOW + 1000).action == "unknown" and at(NOW + 1000).stops_in_s == pytest.approx(800.0)
    warned = at(NOW + 1300)
    assert warned.action == "warn" and warned.cause == "silent" and not warned.keepable
    stopped = at(NOW + 1800)
    assert stopped.action == "stop" and stopped.cause == "silent"
    assert (
        stopped.reason
        == "the hub heard nothing of its GPU for 30 min (the limit for this server is 30 min), so the GPU went back for others"
    )
    # a server placed without GPUs is never stopped as silent; 0 keeps every silent one
    assert at(NOW + 1e6, holds_gpu=False).action == "unknown"
    kept = settings(timeout_seconds=60, silent_seconds=0).policy("server", "")
    t = NOW + 1e6
    assert decide(signal, store.state(signal, t), kept, t, age_s=None, site_kind="origin", groups=frozenset()).action == "unknown"


def test_a_server_that_reports_is_never_stopped_as_silent():
    s = settings(timeout_seconds=3600, silent_seconds=60, warning_seconds=600)
    store = SignalStore(stale_after_s=180)
    report(store, 0.0)
    signal = store.get("alice", "", "server")
    # reported 2 min ago, more than silent_seconds: still known (not yet three periods)
    decision = decide(
        signal, store.state(signal, NOW + 120), s.policy("server", ""), NOW + 120, age_s=None, site_kind="origin", groups=frozenset()
    )
    assert decision.action == "active" and decision.cause == ""


def test_no_gpu_readable_is_never_idle():
    s = settings(timeout_seconds=60)
    store = SignalStore()
    report(store, None)
    signal = store.get("alice", "", "server")
    decision = decide(
        signal, store.state(signal, NOW + 1000), s.policy("server", ""), NOW + 1000, age_s=None, site_kind="origin", groups=frozenset()
    )
    assert decision.action != "stop"


def test_warn_then_stop_then_keep_resets_until_the_limit():
    s = settings(timeout_seconds=3600, warning_seconds=600, keep_limit=1)
    store = SignalStore(stale_after_s=1e9)  # the server keeps reporting the same
    policy = s.policy("server", "")
    report(store, 2999.0)
    signal = store.get("alice", "", "server")

    def at(t):
        return decide(signal, store.state(signal, t), policy, t, age_s=None, site_kind="origin", groups=frozenset())

    assert at(NOW).action == "active" and at(NOW).stops_in_s == 601
    assert at(NOW + 1).action == "warn" and at(NOW + 1).keepable
    assert at(NOW + 1).reason.startswith("its GPU was idle for 50 min")
    assert at(NOW + 601).action == "stop"
    assert store.keep(signal, policy.keep_limit, NOW + 500)
    assert at(NOW + 601).action == "active"
    assert not store.keep(signal, policy.keep_limit, NOW + 510)  # the limit
    assert at(NOW + 500 + 3000 + 1).action == "warn" and not at(NOW + 500 + 3000 + 1).keepable


def test_donors_go_back_sooner_and_exempt_groups_never():
    s = settings(timeout_seconds=7200, donor_timeout_seconds=1800)
    store = SignalStore()
    report(store, 2000.0)
    signal = store.get("alice", "", "server")
    policy = s.policy("server", "")
    state = store.state(signal, NOW)
    assert decide(signal, state, policy, NOW, age_s=None, site_kind="donor", groups=frozenset()).action == "stop"
    assert decide(signal, state, policy, NOW, age_s=None, site_kind="origin", groups=frozenset()).action == "active"
    exempt = settings(exempt_groups=["staff"], timeout_seconds=60).policy("server", "")
    assert decide(signal, state, exempt, NOW, age_s=None, site_kind="donor", groups=frozenset({"staff"})).action == "exempt"


def test_maximum_age_stops_a_busy_server_and_keep_does_not_extend_it():
    s = settings(max_age_seconds=8 * 3600)
    store = SignalStore()
    report(store, 0.0)
    signal = store.get("alice", "", "server")
    policy = s.policy("server", "")
    decision = decide(signal, "reported", policy, NOW, age_s=8 * 3600 - 60, site_kind="origin", groups=frozenset())
    assert decision.action == "warn" and not decision.keepable and "maximum age" in decision.reason
    assert decide(signal, "reported", policy, NOW, age_s=8 * 3600 + 1, site_kind="origin", groups=frozenset()).action == "stop"


def test_per_profile_overrides_and_their_errors():
    s = settings(server_profiles={"gpu-1": {"timeout_seconds": 7200}}, kernel_profiles={"gpu-1": {"timeout_seconds": 120, "enabled": True}})
    assert s.policy("server", "gpu-1").timeout_s == 7200
    assert s.policy("kernel", "gpu-1").timeout_s == 120
    assert s.policy("server", "cpu").timeout_s == 3600
    off = GPUCullingSettings()
    assert not off.policy("server", "gpu-1").enabled  # off by default
    with pytest.raises(TraitError, match="unknown key"):
        settings(server_profiles={"gpu-1": {"timeout": 5}})
    with pytest.raises(TraitError, match="fraction"):
        settings(threshold=5)
    with pytest.raises(TraitError, match="at least 0"):
        settings(kernel_profiles={"gpu-1": {"warning_seconds": -1}})


def test_durations_read_as_people_say_them():
    assert [duration(x) for x in (45, 3000, 7200, 9000)] == ["45 s", "50 min", "2 h", "2 h 30 min"]
