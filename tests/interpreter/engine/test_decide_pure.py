"""Decisions without a store: an outcome of an attempt becomes one commit (engine/decide, compensation).

Each test builds the execution by hand (a plan, a run record, an attempt record, fake services) and
reads the commit: no SQLite, no runtime, no worker.
"""

from __future__ import annotations

import random
import types

from interp_helpers import S, gate, make_plan, retry

from sealflow.core.ids import StepRef
from sealflow.core.outcomes import Failed, Skipped, Succeeded, Waiting
from sealflow.dsl.plan import CompensationPlan, WaitPlan
from sealflow.engine import compensation
from sealflow.engine.decide import decide, schedule_retry, skip_target
from sealflow.execution.context import Execution
from sealflow.store.records import AttemptRecord, RunRecord

NOW = 1_000.0


def run_record(plan, state="running", **kw) -> RunRecord:
    fields = dict(id="run_1", tenant="t", workflow=plan.name, workflow_version=plan.version, plan_digest=plan.digest,
                  input={}, state=state, rev=3, initiator="user:ann", idempotency_key=None, input_hash="h",
                  created_at=NOW, updated_at=NOW, deadline=None, output=None, error_class=None, error_message=None,
                  steps_executed=0, tokens=0, cost_usd=0.0, tool_calls=0, redrives=0, cursor_step=None,
                  cursor_attempt=None)
    fields.update(kw)
    return RunRecord(**fields)


def attempt(step_id="a", try_no=1, state="running", data=None) -> AttemptRecord:
    return AttemptRecord("run_1", step_id, 1, try_no, state, 7, "w", NOW + 5, 10_000, NOW, NOW, None, None, None,
                         None, None, data or {})


def execution(plan, step_id="a", *, run=None, att=None, gate_=False) -> Execution:
    services = types.SimpleNamespace(clock=types.SimpleNamespace(now=lambda: NOW), rng=random.Random(1),
                                     registry=None, store=None, config=None)
    base = StepRef.parse(step_id).step
    return Execution(services, plan, plan.step(base), run or run_record(plan), att or attempt(step_id), None, NOW,
                     gate=gate_, results={})


def test_given_a_success_when_decided_then_the_next_step_is_scheduled_in_the_same_commit():
    plan = make_plan(S("a", "action", action="t.a"), S("b", "action", action="t.b"))
    commit = decide(execution(plan), Succeeded({"ok": 1}), actor="worker:w")
    assert commit.step.state == "succeeded" and commit.step.output_json == '{"ok":1}'
    assert commit.next.step_id == "b" and commit.next.state == "scheduled" and commit.next.lease_ms == 5_000 + 5_000
    assert commit.run.state == "running" and commit.expected_rev == 3 and commit.dispatch_inline


def test_given_the_last_step_succeeds_when_decided_then_the_run_completes():
    plan = make_plan(S("a", "action", action="t.a"))
    commit = decide(execution(plan), Succeeded(5), actor="w")
    assert commit.run.state == "completed" and commit.next is None


def test_given_a_retryable_failure_when_decided_then_a_backoff_try_is_scheduled_and_audited():
    plan = make_plan(S("a", "action", action="t.a", retry=retry("network", max_attempts=3, initial_ms=2000)))
    commit = decide(execution(plan), Failed("network", "boom"), actor="w")
    assert commit.step.state == "failed" and commit.run.state == "running"
    assert (commit.next.step_id, commit.next.try_no, commit.next.state) == ("a", 2, "retry_wait")
    assert commit.next.due_at == NOW + 2.0 and commit.next.timer_kind == "backoff"
    assert [e.event for e in commit.audit] == ["retry_scheduled"]


def test_given_retries_exhausted_when_decided_then_the_run_fails_into_the_dead_letters():
    plan = make_plan(S("a", "action", action="t.a", retry=retry("network", max_attempts=2)))
    commit = decide(execution(plan, att=attempt(try_no=2)), Failed("network", "boom"), actor="w")
    assert commit.run.state == "failed" and commit.run.error_class == "network"
    assert commit.dead_letter.error_class == "network" and commit.dead_letter.fingerprint.startswith("sha256:")


def test_given_a_run_being_cancelled_when_a_success_is_decided_then_the_result_is_kept_and_the_run_cancelled():
    plan = make_plan(S("a", "action", action="t.a"), S("b", "action", action="t.b"))
    commit = decide(execution(plan, run=run_record(plan, state="cancelling")), Succeeded(1), actor="w")
    assert commit.step.state == "succeeded" and commit.run.state == "cancelled" and commit.next is None


def test_given_a_gate_condition_true_when_decided_then_the_gate_opens_instead_of_moving_on():
    plan = make_plan(S("a", "action", action="t.a", gate=gate(), requires_approval_if="true"),
                     S("b", "action", action="t.b"))
    commit = decide(execution(plan), Succeeded(1), actor="w")
    assert commit.next.step_id == "a@gate" and commit.next.state == "waiting" and commit.run.state == "waiting"
    assert commit.next.data["then"] == "b" and commit.next.data["show_hash"].startswith("sha256:")


def test_given_a_waiting_outcome_when_decided_then_the_attempt_waits_with_its_timer():
    plan = make_plan(S("a", "wait", wait=WaitPlan(for_ms=1000)))
    commit = decide(execution(plan), Waiting(NOW + 1, "wait", {"fire_at": NOW + 1}), actor="w")
    assert commit.step.state == "waiting" and commit.step.timer_kind == "wait" and commit.run.state == "waiting"


def test_given_a_skip_when_decided_then_control_takes_the_skip_target():
    plan = make_plan(S("a", "action", action="t.a", when="false"), S("b", "action", action="t.b"))
    assert skip_target(plan.step("a")) == "b"
    commit = decide(execution(plan), Skipped("b"), actor="w")
    assert commit.step.state == "skipped" and commit.next.step_id == "b"


def test_given_a_policy_when_a_retry_is_scheduled_then_steps_and_compensations_share_one_scheduler():
    failed = Failed("network", "x")
    nxt, event = schedule_retry(retry("network", max_attempts=2, initial_ms=0), "a@compensate", 1, failed,
                                rng=random.Random(1), now=NOW, lease=9, actor="w", data={"queue": []})
    assert (nxt.state, nxt.due_at, nxt.timer_kind, nxt.data) == ("scheduled", NOW, None, {"queue": []})
    assert event.detail["next_try"] == 2
    assert schedule_retry(retry("network", max_attempts=2), "a", 2, failed, rng=random.Random(1), now=NOW,
                          lease=9, actor="w") is None


# -- compensation's decisions -------------------------------------------------------------------------

def saga_plan():
    undo = CompensationPlan(action="t.undo", timeout_ms=1000, retry=retry("network", max_attempts=2))
    return make_plan(S("a", "action", action="t.a", compensate=undo), S("b", "action", action="t.b", compensate=undo))


def test_given_a_compensation_succeeds_with_more_queued_when_decided_then_the_next_one_is_scheduled():
    plan = saga_plan()
    att = attempt("b@compensate", data={"queue": ["a"], "end": "failed", "why": "x", "dead_letter": None})
    x = execution(plan, "b@compensate", run=run_record(plan, state="compensating"), att=att)
    commit = compensation.decide(x, Succeeded({"undone": True}), actor="w")
    assert commit.next.step_id == "a@compensate" and commit.next.data["queue"] == []
    assert commit.ledger.key == "run_1:b:compensate" and commit.run.state is None


def test_given_the_last_compensation_succeeds_when_decided_then_the_run_ends_as_it_would_have():
    plan = saga_plan()
    att = attempt("a@compensate", data={"queue": [], "end": "cancelled", "why": "x", "dead_letter": None})
    x = execution(plan, "a@compensate", run=run_record(plan, state="compensating"), att=att)
    commit = compensation.decide(x, Succeeded(None), actor="w")
    assert commit.run.state == "cancelled" and commit.next is None and commit.dead_letter is None
    assert commit.audit[-1].event == "compensation.finished"


def test_given_a_compensation_fails_for_good_when_decided_then_the_run_is_quarantined():
    plan = saga_plan()
    att = attempt("a@compensate", try_no=2, data={"queue": [], "end": "failed", "why": "x", "dead_letter": None})
    x = execution(plan, "a@compensate", run=run_record(plan, state="compensating"), att=att)
    commit = compensation.decide(x, Failed("network", "down"), actor="w")
    assert commit.run.state == "quarantined" and "quarantined" in commit.run.error_message
    assert commit.dead_letter.step_id == "a@compensate"


def test_given_a_compensation_fails_with_retries_left_when_decided_then_it_is_retried_keeping_its_queue():
    plan = saga_plan()
    att = attempt("a@compensate", data={"queue": ["z"], "end": "failed"})
    x = execution(plan, "a@compensate", run=run_record(plan, state="compensating"), att=att)
    commit = compensation.decide(x, Failed("network", "down"), actor="w")
    assert commit.next.step_id == "a@compensate" and commit.next.try_no == 2 and commit.next.data["queue"] == ["z"]
