"""Approvals: explicit approval steps and ``requires_approval_if`` gates; they fail closed."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, gate, make_plan

from sealflow.core.errors import StepError
from sealflow.execution.actions import action
from sealflow.store import InvalidOperation


@pytest.fixture
def notes(registry):
    calls = []

    @action("t.note", registry=registry, effect="write")
    def note(ctx, text="", value=0):
        calls.append(text)
        return {"text": text, "value": value}

    return calls


def approval_plan(**kw):
    return make_plan(
        S("ask", "approval", approval=approval(show="input", **kw)),
        S("act", "action", action="t.note", args={"text": "approved"}),
        output="${{ steps.ask.output }}",
    )


def test_an_approval_waits_then_goes_on_when_approved(runtime, notes):
    # Given a run waiting at an approval step
    status = runtime.run(approval_plan(), {"amount": 10}, initiator="user:ana")
    assert status.state == "waiting" and notes == []
    assert status.waiting["kind"] == "approval" and status.waiting["show"] == {"amount": 10}
    assert status.waiting["approvers"] == ["role:manager"]
    # When someone else approves
    runtime.approve(status.run.id, actor="user:ben", comment="fine")
    status = runtime.drive(status.run.id)
    # Then the run goes on and records who approved what
    assert status.state == "completed" and notes == ["approved"]
    (granted,) = status.output["approvals"]
    assert granted["actor"] == "user:ben" and granted["show_hash"].startswith("sha256:")


def test_the_initiator_cannot_approve_their_own_run(runtime, notes):
    status = runtime.run(approval_plan(), {}, initiator="user:ana")
    with pytest.raises(StepError, match="separation of duties") as err:
        runtime.approve(status.run.id, actor="user:ana")
    assert err.value.error_class == "unauthorized"
    assert runtime.status(status.run.id).state == "waiting"


def test_roles_when_given_must_meet_the_approvers(runtime, notes):
    status = runtime.run(approval_plan(), {}, initiator="user:ana")
    with pytest.raises(StepError, match="not an approver"):
        runtime.approve(status.run.id, actor="user:eve", roles=["role:intern"])
    runtime.approve(status.run.id, actor="user:ben", roles=["role:manager"])
    assert runtime.drive(status.run.id).state == "completed"


def test_a_quorum_needs_distinct_approvers(runtime, notes):
    status = runtime.run(approval_plan(quorum=2), {}, initiator="user:ana")
    assert runtime.approve(status.run.id, actor="user:ben").state == "waiting"
    with pytest.raises(InvalidOperation, match="already approved"):
        runtime.approve(status.run.id, actor="user:ben")
    runtime.approve(status.run.id, actor="user:cy")
    status = runtime.drive(status.run.id)
    assert status.state == "completed" and [a["actor"] for a in status.output["approvals"]] == ["user:ben", "user:cy"]


def test_a_rejection_fails_the_step_with_policy_denied(runtime, notes):
    status = runtime.run(approval_plan(), {}, initiator="user:ana")
    runtime.reject(status.run.id, actor="user:ben", reason="too expensive")
    status = runtime.drive(status.run.id)
    assert status.state == "failed" and notes == []
    assert status.error == ("policy_denied", "rejected by user:ben: too expensive")


def test_an_unanswered_approval_times_out_and_rejects(runtime, notes, clock):
    status = runtime.run(approval_plan(timeout_ms=3_600_000), {}, initiator="user:ana")
    assert runtime.store.timers(status.run.id)[0].kind == "approval_timeout"
    clock.advance(3600)
    status = runtime.drive(status.run.id)
    assert status.state == "failed" and status.error[0] == "policy_denied" and notes == []
    assert "fails closed" in status.error[1]
    with pytest.raises(InvalidOperation, match="no approval waiting"):
        runtime.approve(status.run.id, actor="user:ben")


def test_on_timeout_next_routes_to_an_escalation_step(runtime, notes, clock):
    plan = make_plan(S("ask", "approval", approval=approval(timeout_ms=60_000, on_timeout="escalate")),
                     S("act", "action", action="t.note", args={"text": "approved"}, next="end"),
                     S("escalate", "action", action="t.note", args={"text": "escalated"}))
    status = runtime.run(plan, {}, initiator="user:ana")
    clock.advance(61)
    status = runtime.drive(status.run.id)
    assert status.state == "completed" and notes == ["escalated"]
    assert status.step_states()["ask"] == "timed_out"


def test_a_rejection_can_be_routed_by_on_error(runtime, notes):
    plan = make_plan(S("ask", "approval", approval=approval(), on_error=({"errors": ("policy_denied",),
                                                                         "next": "declined"},)),
                     S("act", "action", action="t.note", args={"text": "approved"}, next="end"),
                     S("declined", "action", action="t.note", args={"text": "declined"}))
    status = runtime.run(plan, {}, initiator="user:ana")
    runtime.reject(status.run.id, "ask", actor="user:ben", reason="no")
    assert runtime.drive(status.run.id).state == "completed" and notes == ["declined"]


def gated_plan():
    return make_plan(
        S("record", "action", action="t.note", args={"text": "note", "value": "${{ input.value }}"},
          requires_approval_if="output.value > 100", gate=gate(timeout_ms=86_400_000)),
        S("email", "action", action="t.note", args={"text": "email"}),
        output="${{ steps.record.output.value }}",
    )


def test_requires_approval_if_true_holds_the_run_after_the_step(runtime, notes):
    # Given a step whose output needs approval when its value is high
    status = runtime.run(gated_plan(), {"value": 500}, initiator="user:ana")
    # Then the step ran (once) and the run waits at its gate, before the next step
    assert status.state == "waiting" and notes == ["note"]
    assert status.step_states() == {"record": "succeeded", "record@gate": "waiting"}
    assert status.waiting["kind"] == "approval" and status.waiting["step"] == "record@gate"
    # When approved
    runtime.approve(status.run.id, "record", actor="user:ben")
    status = runtime.drive(status.run.id)
    # Then the run goes on without repeating the step
    assert status.state == "completed" and notes == ["note", "email"] and status.output == 500


def test_requires_approval_if_false_goes_straight_on(runtime, notes):
    status = runtime.run(gated_plan(), {"value": 5}, initiator="user:ana")
    assert status.state == "completed" and notes == ["note", "email"]
    assert "record@gate" not in status.step_states()


def test_a_rejected_gate_fails_the_run_before_the_next_step(runtime, notes):
    status = runtime.run(gated_plan(), {"value": 500}, initiator="user:ana")
    runtime.reject(status.run.id, actor="user:ben", reason="value too high")
    status = runtime.drive(status.run.id)
    assert status.state == "failed" and status.error[0] == "policy_denied" and notes == ["note"]


def test_an_unanswered_gate_times_out_and_rejects(runtime, notes, clock):
    status = runtime.run(gated_plan(), {"value": 500}, initiator="user:ana")
    clock.advance(86_400)
    status = runtime.drive(status.run.id)
    assert status.state == "failed" and status.error[0] == "policy_denied" and notes == ["note"]


def test_approve_on_a_wait_step_is_refused(runtime):
    status = runtime.run(make_plan(S("pause", "wait", wait={"for_ms": 3_600_000})), {}, initiator="user:ana")
    with pytest.raises(InvalidOperation, match="not an approval"):
        runtime.approve(status.run.id, actor="user:ben")


def test_a_gate_on_a_switch_keeps_the_chosen_branch(runtime, notes):
    plan = make_plan(
        S("route", "switch", switch=({"when": "input.big", "next": "big"},), requires_approval_if="input.big",
          gate=gate()),
        S("small", "action", action="t.note", args={"text": "small"}, next="end"),
        S("big", "action", action="t.note", args={"text": "big"}),
    )
    status = runtime.run(plan, {"big": True}, initiator="user:ana")
    assert status.state == "waiting" and notes == []
    runtime.approve(status.run.id, actor="user:ben")
    assert runtime.drive(status.run.id).state == "completed" and notes == ["big"]


def test_drive_returns_at_an_approval_even_with_a_short_timeout(runtime, notes, clock):
    start = clock.now()
    status = runtime.run(approval_plan(timeout_ms=1_000), {}, initiator="user:ana", until="final")
    assert status.state == "waiting" and clock.now() == start  # no sleeping towards the timeout


def test_a_rejected_gate_can_be_redriven_and_approved(runtime, notes):
    status = runtime.run(gated_plan(), {"value": 500}, initiator="user:ana")
    runtime.reject(status.run.id, actor="user:ben", reason="not yet")
    assert runtime.drive(status.run.id).state == "failed"
    assert runtime.dlq_redrive(status.run.id).waiting["step"] == "record@gate"
    runtime.approve(status.run.id, actor="user:ben")
    status = runtime.drive(status.run.id)
    assert status.state == "completed" and notes == ["note", "email"]
