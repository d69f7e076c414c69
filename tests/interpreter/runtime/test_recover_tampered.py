"""Recovery when one run's stored plan is not what its digest says (a tampered ``plans`` row, issue 31).

Before, the first such run recovery met made the whole of it raise ``PlanTampered``: every other run in flight
stayed where it was, and so did every sweep after that run passed its deadline. Now recovery goes on with the
others; the tampered run is refused as the engine refuses it (failed into the dead-letter list when its step
is due) and named in the report with the reason. On every store backend."""

from __future__ import annotations

import random

from interp_helpers import S, approval, make_plan
from plan_rows import forget_plans, tamper

from sealflow.runtime.facade import Runtime


def _runtime(store, registry, clock) -> Runtime:
    return Runtime(store, registry, {}, clock=clock, rng=random.Random(7), worker_timeout_ms=20)


def test_given_one_run_s_plan_tampered_when_recovering_then_the_others_go_on_and_it_is_refused_with_the_reason(
        store, registry, clock):
    # Given two queued runs of two workflows, and the plans row of the second rewritten in the store
    good = make_plan(S("a", "set", assign={"x": "1"}), name="good")
    bad = make_plan(S("a", "set", assign={"x": "2"}), name="bad")
    rt = _runtime(store, registry, clock)
    try:
        ok_run = rt.submit(good, {}, initiator="user:ana")
        bad_run = rt.submit(bad, {}, initiator="user:ana")
        tamper(store, bad.digest)
        forget_plans(rt)
        # When an operator recovers (as `sealflow recover` does), then drives what is in flight
        report = rt.recover(leave_unready=True)
        ok_state = rt.drive(ok_run, timeout=20).state
        bad_status = rt.drive(bad_run, timeout=20)
        letters = rt.dlq_list()
    finally:
        rt.close()
    # Then the other run completed
    assert ok_state == "completed"
    # And the tampered one was refused as the engine refuses it: failed, in the dead-letter list
    assert bad_status.state == "failed" and bad_status.error[0] == "unauthorized"
    assert [d.run_id for d in letters] == [bad_run] and "[tampered]" in letters[0].reason
    # And the report names it with the reason (not as a run this process lacks something for)
    [refused] = report["runs_refused"]
    assert (refused["run_id"], refused["workflow"], refused["version"]) == (bad_run, "bad", 1)
    assert "does not match its digest" in refused["reason"] and refused["plan"] == bad.digest
    assert "sealflow dlq redrive" in refused["how"]
    assert report["runs_left"] == [] and report["runs_refused_unreadable"] == 0
    assert ok_run in report["runs_in_flight"]


def test_given_a_tampered_run_past_its_deadline_when_sweeping_then_it_times_out_and_other_runs_go_on(
        store, registry, clock):
    # Given a run waiting at an approval gate with a one-minute max_runtime, its plan row then rewritten, and
    # another run queued
    gated = make_plan(S("ask", "approval", approval=approval()), S("a", "set", assign={"x": "1"}), name="gated",
                      budget={"max_runtime_ms": 60_000})
    good = make_plan(S("a", "set", assign={"x": "1"}), name="good")
    rt = _runtime(store, registry, clock)
    try:
        gated_run = rt.submit(gated, {}, initiator="user:ana")
        assert rt.drive(gated_run, timeout=20).state == "waiting"
        ok_run = rt.submit(good, {}, initiator="user:ana")
        tamper(store, gated.digest)
        forget_plans(rt)
        # When its deadline passes and the other run is driven (each round of which sweeps)
        clock.advance(61)
        ok_state = rt.drive(ok_run, timeout=20).state
        gated_status = rt.status(gated_run)
        report = rt.recover(leave_unready=True)  # and recovery sweeps again
    finally:
        rt.close()
    # Then the sweep went on: the other run completed and the tampered one timed out (dead-lettered), with no
    # compensation taken from its plan
    assert ok_state == "completed"
    assert gated_status.state == "timed_out" and store.dead_letter(gated_run) is not None
    assert report["runs_refused"] == [] and report["runs_in_flight"] == []


def test_given_a_stalled_run_whose_plan_is_tampered_when_recovering_then_it_is_named_and_the_rest_recovered(
        store, registry, clock):
    # Given a run in flight with no attempt at all (the safety net's case: recovery repairs it from its plan)
    # whose plan row is then rewritten, and another run queued
    bad = make_plan(S("a", "set", assign={"x": "2"}), name="bad")
    good = make_plan(S("a", "set", assign={"x": "1"}), name="good")
    rt = _runtime(store, registry, clock)
    try:
        bad_run = rt.submit(bad, {}, initiator="user:ana")
        ok_run = rt.submit(good, {}, initiator="user:ana")
        _drop_attempts(store, bad_run)
        assert bad_run in store.stalled_runs()
        tamper(store, bad.digest)
        forget_plans(rt)
        # When an operator recovers, and the process then starts (its own recovery, which finds the run
        # stalled and would repair it from its plan) to drive the other run
        report = rt.recover(leave_unready=True)
        ok_state = rt.drive(ok_run, timeout=20).state
    finally:
        rt.close()
    # Then the other run completed, the stalled one was not repaired from that plan, and it is named
    assert ok_state == "completed"
    assert bad_run not in report["runs_repaired"]
    assert [r["run_id"] for r in report["runs_refused"]] == [bad_run]


def _drop_attempts(store, run_id: str) -> None:
    """The run loses its attempts and outbox rows (what atomic commits rule out: recovery's safety net)."""
    path = getattr(store, "path", None)
    if path is not None:
        import sqlite3

        with sqlite3.connect(path) as conn:
            for table in ("outbox", "attempts"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        return
    with store._connect() as conn:
        for table in ("outbox", "attempts"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))


def test_given_another_tenant_s_tampered_run_when_a_member_recovers_then_it_is_counted_never_named(rt):
    # Given a queued run of acme and one of globex whose plan row was rewritten (the secured runtime: acme/globex)
    acme = make_plan(S("a", "set", assign={"x": "1"}), name="acme-flow")
    globex = make_plan(S("a", "set", assign={"x": "2"}), name="globex-flow")
    acme_run = rt.submit(acme, {}, initiator="user:alice", tenant="acme")
    globex_run = rt.submit(globex, {}, initiator="user:eve", tenant="globex")
    tamper(rt.store, globex.digest)
    forget_plans(rt)
    # When alice recovers acme's runs, and eve globex's
    report = rt.recover(actor="user:alice", tenant="acme", leave_unready=True)
    as_eve = rt.recover(actor="user:eve", tenant="globex", leave_unready=True)
    # Then for alice globex's run is only counted: no id, no workflow, no plan, no reason
    assert acme_run in report["runs_in_flight"]
    assert report["runs_refused"] == [] and report["runs_refused_unreadable"] == 1
    assert globex_run not in str(report) and globex.digest not in str(report)
    # And eve, who may read it, sees it named with the reason
    assert [e["run_id"] for e in as_eve["runs_refused"]] == [globex_run] and as_eve["runs_refused_unreadable"] == 0
    # And acme's run goes on while globex's is refused into the dead letters
    assert rt.drive(acme_run).state == "completed" and rt.drive(globex_run).state == "failed"
