"""The capacity study's warm pool cost: what placeholders hold around each lab's start."""

from __future__ import annotations

import json

from jupyter_gpuburst.bench import trace
from jupyter_gpuburst.bench.trace_model import DAY, HOUR, Session, TraceParams
from jupyter_gpuburst.bench.trace_pools import PoolPlan, lab_starts, pool_cost

ONE_LAB = TraceParams(students=4, weeks=1, lab_sections=((1, 14.0, 1.0),))
T0 = DAY + 14 * HOUR


def lab_session(sid: int, minutes_after_start: float) -> Session:
    return Session(sid, f"s{sid}", T0 + minutes_after_start * 60, 3600.0, 1, 4.0, lab=True)


def test_a_placeholder_costs_the_pool_until_a_student_takes_it():
    # two placeholders up 30 min before the lab, down 15 min after; students at +1 and +2 min,
    # and one at +20 min (after the pool went): two warm starts
    sessions = [lab_session(0, 1.0), lab_session(1, 2.0), lab_session(2, 20.0)]
    cost = pool_cost(sessions, ONE_LAB, PoolPlan(gpus=2, lead_min=30, hold_min=15))
    assert cost["labs"] == 1 and cost["lab_students"] == 3 and cost["lab_students_warm"] == 2
    assert cost["gpu_hours_held"] == round((31 + 32) / 60, 1)


def test_an_unused_placeholder_costs_the_whole_window():
    cost = pool_cost([lab_session(0, 1.0)], ONE_LAB, PoolPlan(gpus=3, lead_min=30, hold_min=15))
    assert cost["gpu_hours_per_lab"] == round((31 + 2 * 45) / 60, 2)
    assert cost["warm_share"] == 1.0


def test_homework_sessions_take_no_placeholder():
    homework = Session(9, "s9", T0 + 60, 3600.0, 1, 4.0, lab=False)
    cost = pool_cost([homework], ONE_LAB, PoolPlan(gpus=1, lead_min=30, hold_min=15))
    assert cost["lab_students_warm"] == 0 and cost["gpu_hours_held"] == round(45 / 60, 1)


def test_the_study_reports_the_pools_cost_beside_what_students_hold(capsys):
    assert lab_starts(ONE_LAB) == [T0]
    assert trace.main(["--weeks", "2", "--plot-week", "0", "--pool-gpus", "4", "--json"]) in (0, 1)
    result = json.loads(capsys.readouterr().out)
    pools = result["pools"]
    assert pools["pool_gpus"] == 4 and pools["labs"] == 4 and pools["gpu_hours_held"] > 0
    held = result["results"]["server/local-first"]["gpu_hours_held"]
    assert pools["share_of_student_gpu_hours"] == round(pools["gpu_hours_held"] / held, 4)
    assert trace.main(["--weeks", "2", "--plot-week", "0", "--pool-gpus", "0", "--json"]) in (0, 1)
    assert "pools" not in json.loads(capsys.readouterr().out)
