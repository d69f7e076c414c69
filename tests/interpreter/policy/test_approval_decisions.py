"""Approval decisions without a store or a runtime: who may decide, quorum, binding, separation of duties."""

from __future__ import annotations

import random
import types

import pytest
from interp_helpers import S, approval, make_plan

from sealflow.core.outcomes import Failed, Succeeded, Waiting
from sealflow.execution.context import Execution
from sealflow.policy.approvals import Refusal, deny, eligible_as, grant, may_decide, opening
from sealflow.store.records import AttemptRecord, RunRecord

NOW = 1_000.0


def run_record(plan, **kw) -> RunRecord:
    fields = dict(id="run_1", tenant="t", workflow=plan.name, workflow_version=plan.version, plan_digest=plan.digest,
                  input={}, state="waiting", rev=1, initiator="user:ann", idempotency_key=None, input_hash="h",
                  created_at=NOW, updated_at=NOW, deadline=None, output=None, error_class=None, error_message=None,
                  steps_executed=0, tokens=0, cost_usd=0.0, tool_calls=0, redrives=0, cursor_step=None,
                  cursor_attempt=None)
    fields.update(kw)
    return RunRecord(**fields)


def waiting_gate(quorum=1, approvers=("role:manager",), **run_kw):
    """An execution of an open approval step (its gate data recorded as the engine records it)."""
    plan = make_plan(S("ok", "approval", approval=approval(quorum=quorum, approvers=approvers)))
    run = run_record(plan, **run_kw)
    services = types.SimpleNamespace(clock=types.SimpleNamespace(now=lambda: NOW), rng=random.Random(1))
    step = plan.step("ok")
    att = AttemptRecord("run_1", "ok", 1, 1, "waiting", 3, None, None, 1000, NOW, NOW, None, NOW + 60, None, None,
                        None, {})
    first = Execution(services, plan, step, run, att, None, NOW, results={})
    att.data = opening(first, step.approval, NOW)
    return Execution(services, plan, step, run, att, None, NOW + 1, results={}), att


MANAGER = frozenset({"role:manager"})


def test_given_approvers_when_eligibility_is_asked_then_principals_match_exactly_and_roles_through_holdings():
    assert eligible_as("user:bob", ("user:bob", "role:manager"), ()) == "user:bob"
    assert eligible_as("user:cy", ("user:bob", "role:manager"), MANAGER) == "role:manager"
    assert eligible_as("user:cy", ("user:bob",), MANAGER) is None


def test_given_a_quorum_of_one_when_an_approver_grants_then_the_step_succeeds_and_the_grant_is_audited():
    x, _ = waiting_gate()
    outcome, events = grant(x, "user:bob", MANAGER, "fine", [])
    assert isinstance(outcome, Succeeded) and outcome.output["approved"] is True
    assert [e.event for e in events] == ["approval_granted"] and events[0].detail["as"] == "role:manager"


def test_given_a_quorum_of_two_when_one_grants_then_the_gate_keeps_waiting_with_the_approval_recorded():
    x, _ = waiting_gate(quorum=2)
    outcome, _ = grant(x, "user:bob", MANAGER, None, [])
    assert isinstance(outcome, Waiting) and [a["actor"] for a in outcome.data["approvals"]] == ["user:bob"]


def test_given_the_initiator_when_it_decides_then_separation_of_duties_refuses_it():
    x, _ = waiting_gate()
    with pytest.raises(Refusal) as refused:
        grant(x, "user:ann", MANAGER, None, [])
    assert refused.value.reason == "separation_of_duties"


def test_given_a_run_acting_as_a_service_when_that_service_decides_then_it_is_refused_too():
    x, _ = waiting_gate(acting_as="service:nightly")
    assert x.run.acting == "service:nightly"
    with pytest.raises(Refusal, match="cannot decide"):
        deny(x, "service:nightly", MANAGER, "no")


def test_given_no_approver_role_when_granting_then_it_is_refused_as_not_an_approver():
    x, _ = waiting_gate()
    with pytest.raises(Refusal) as refused:
        grant(x, "user:eve", frozenset(), None, [])
    assert refused.value.reason == "not_an_approver"


def test_given_a_rejection_when_decided_then_the_step_fails_policy_denied_with_the_reason():
    x, _ = waiting_gate()
    outcome, events = deny(x, "user:bob", MANAGER, "too risky")
    assert isinstance(outcome, Failed) and outcome.error_class == "policy_denied" and "too risky" in outcome.message
    assert events[0].event == "approval_rejected"


def test_given_the_plan_changed_since_the_gate_opened_when_granting_then_the_gate_reopens_and_approvals_are_void():
    x, att = waiting_gate()
    att.data = {**att.data, "plan_digest": "sha256:other"}
    void: list = []
    outcome, events = grant(x, "user:bob", MANAGER, None, void)
    assert isinstance(outcome, Waiting) and outcome.data["reopened"] == 1 and "plan_digest" in void[0]
    assert events[0].event == "approval_void"


def test_given_an_expired_gate_when_deciding_then_it_is_refused_as_expired():
    x, att = waiting_gate()
    att.due_at = NOW
    with pytest.raises(Refusal) as refused:
        grant(x, "user:bob", MANAGER, None, [])
    assert refused.value.reason == "expired"


def test_given_open_gates_when_listing_what_a_principal_may_decide_then_the_rules_are_the_same():
    x, att = waiting_gate()
    assert may_decide(x.run, att, "user:bob", MANAGER, NOW) == "role:manager"
    assert may_decide(x.run, att, "user:ann", MANAGER, NOW) is None  # the initiator
    assert may_decide(x.run, att, "user:bob", frozenset(), NOW) is None
    assert may_decide(x.run, att, "user:bob", MANAGER, NOW + 61) is None  # past its deadline
    assert may_decide(x.run, None, "user:bob", MANAGER, NOW) is None
