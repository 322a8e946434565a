"""Fault schedules and expired history: what the chaos benchmark drives the emulator with."""

from __future__ import annotations


def test_expired_history_answers_only_old_versions():
    from jupyter_gpuburst.sim.faults import Faults

    faults = Faults()
    assert not faults.is_expired("5")
    faults.expire_history(10)
    assert faults.is_expired("9") and not faults.is_expired("10") and not faults.is_expired("11")
    # "any version" and "most recent" are always served
    assert not faults.is_expired("0") and not faults.is_expired("") and not faults.is_expired(None)
    faults.expire_history(3)  # never moves back
    assert faults.is_expired("9")


async def test_fault_schedule_runs_each_step_at_its_time_with_the_callers_actions():
    import asyncio

    import pytest

    from jupyter_gpuburst.sim.faults import FaultSchedule, FaultStep

    with pytest.raises(ValueError, match="unknown fault step"):
        FaultStep(0, "meteor")
    seen: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    start = loop.time()

    def action(kind):
        async def run(step):
            seen.append((kind, round(loop.time() - start, 1)))
            await asyncio.sleep(step.duration_s)
            seen.append((f"{kind} end", round(loop.time() - start, 1)))

        return run

    # api_down ends well after watch_drop begins: 0.1 s apart, a loaded machine's loop may wake
    # late for both at once and run the end first
    schedule = FaultSchedule([FaultStep(0.2, "watch_drop"), FaultStep(0.0, "api_down", 1.0)])
    assert schedule.length_s == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no action"):
        await schedule.run({"watch_drop": action("watch_drop")})
    await schedule.run({"watch_drop": action("watch_drop"), "api_down": action("api_down")})
    kinds = [k for k, _ in seen]
    # steps with a duration overlap the later ones
    assert kinds == ["api_down", "watch_drop", "watch_drop end", "api_down end"]
    assert [k for _, k in schedule.done] == ["api_down", "watch_drop"]
    chaos = FaultSchedule.chaos(60)
    assert {s.kind for s in chaos.steps} == {"errors", "watch_drop", "watch_gone", "api_down", "peering_lost", "hub_kill"}
    assert sum(s.kind == "hub_kill" for s in chaos.steps) == 2
    assert [s.duration_s for s in chaos.steps if s.kind in ("api_down", "peering_lost")] == [10.0, 10.0]


def test_kube_chaos_schedule_holds_the_real_control_planes_faults_one_after_another():
    from jupyter_gpuburst.sim.faults import EMULATOR_STEPS, KUBE_STEPS, STEP_KINDS, FaultSchedule

    assert EMULATOR_STEPS | KUBE_STEPS == set(STEP_KINDS)
    schedule = FaultSchedule.kube_chaos(45, donor="donor-7")
    assert [s.kind for s in schedule.steps] == ["etcd_down", "apiserver_restart", "hub_kill", "donor_control_plane_lost"]
    assert {s.kind for s in schedule.steps} <= KUBE_STEPS
    etcd, _, _, donor = schedule.steps
    assert etcd.duration_s == 8.0 and donor.params == {"donor": "donor-7"}
    # none overlaps the next: each outage ends before the next fault starts
    for step, after in zip(schedule.steps, schedule.steps[1:], strict=False):
        assert step.at_s + step.duration_s < after.at_s, (step, after)
