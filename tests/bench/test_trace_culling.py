"""The capacity study's GPU culling: the product's stop rule on sessions whose busy periods are
known, the culled server mode, kernel mode's release by the product's rule, and checks that fail."""

from __future__ import annotations

from jupyter_gpuburst.bench import trace
from jupyter_gpuburst.bench.trace_culling import CullRule, culling_summary, server_stop, with_open_tabs
from jupyter_gpuburst.bench.trace_model import HOUR, Session, TraceParams

RULE = CullRule(timeout_s=1800, period_s=60)
SMALL = TraceParams(students=30, weeks=2)


def session(length: float, busy) -> Session:
    return Session(0, "u", 1000.0, length, 2, 4.0, busy=tuple(busy))


def test_a_server_is_stopped_at_the_first_sweep_after_its_timeout():
    s = session(8 * HOUR, [(0.0, 60.0), (600.0, 60.0)])  # last busy at 1000 + 660
    # idle from 1660 on: due at 3460, stopped by the sweep at 3480 (sweeps every 60 s)
    assert server_stop(s, RULE) == 3480.0
    assert RULE.stop_at(1660.0) == 3480.0 and RULE.stop_at(1680.0) == 3480.0
    # a session that ends before its timeout is never stopped
    assert server_stop(session(1200.0, [(0.0, 60.0)]), RULE) is None


def test_a_long_pause_stops_the_server_and_counts_as_culled_while_working():
    s = session(5 * HOUR, [(0.0, 60.0), (2 * HOUR, 60.0)])  # back after two hours: too late
    stop = server_stop(s, RULE)
    assert stop is not None and stop < 1000.0 + 2 * HOUR
    summary = culling_summary([s], RULE)
    assert summary["sessions_culled"] == 1 and summary["culled_while_working"] == 1
    (demand,) = trace.CulledServerMode(RULE).demands(s, 0)
    assert demand.hold == stop - s.start and demand.active == 60.0


def test_kernel_mode_releases_by_the_products_rule():
    s = session(4 * HOUR, [(0.0, 60.0), (1000.0, 60.0), (3 * HOUR, 60.0)])
    demands = trace.KernelMode(rule=RULE).demands(s, 0)
    # the second busy period comes before the culler would stop the kernel: one kernel
    assert [round(d.start - s.start) for d in demands] == [0, 3 * 3600]
    assert demands[0].hold == RULE.stop_at(s.start + 1060.0) - s.start


def test_the_study_reports_culling_and_its_checks_can_fail():
    federation = trace.Federation(local_gpus=8, donor_gpus=(("donor-a", 16), ("donor-b", 16)))
    good, _ = trace.run_study(SMALL, federation, ["server", "server-culled"], ["local-first"], cull_timeout=5400, open_tab_share=0.4)
    assert good["checks"]["culling_while_working_at_most_1pct"] and good["checks"]["culling_gives_back_half_the_idle"], good["culling"]
    culled = good["results"]["server-culled/local-first"]
    assert culled["gpu_hours_held"] < good["results"]["server/local-first"]["gpu_hours_held"]
    # a 5-minute timeout stops students between two cells: the check says so
    bad, _ = trace.run_study(SMALL, federation, ["server"], ["local-first"], cull_timeout=300)
    assert bad["checks"]["culling_while_working_at_most_1pct"] is False and bad["ok"] is False
    # without open tabs, little of the idle time is in long gaps: the half is not reached
    none, _ = trace.run_study(SMALL, federation, ["server"], ["local-first"], cull_timeout=5400)
    assert none["checks"]["culling_gives_back_half_the_idle"] is False


def test_open_tabs_extend_sessions_to_the_cap_and_nothing_else():
    sessions = [session(3600.0, [(0.0, 60.0)]) for _ in range(200)]
    opened = with_open_tabs(sessions, SMALL, 0.5)
    longer = [s for s in opened if s.length == SMALL.session_cap_h * HOUR]
    assert 60 <= len(longer) <= 140
    assert all(s.busy == ((0.0, 60.0),) for s in opened)
    assert with_open_tabs(sessions, SMALL, 0.0) is sessions
