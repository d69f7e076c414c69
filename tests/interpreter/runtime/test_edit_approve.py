"""Edit and approve: an approver changes a gate's proposed value (checked by its editable schema), the approval binds
to the edited value, the audit records before and after, and the steps after see the edit. On every store."""

from __future__ import annotations

import random

import pytest

from sealflow.dsl.api import compile_bytes
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store.errors import InvalidOperation

WORKFLOW = b"""\
sealflow: 1
name: outreach
version: 1
owner: team:t
input: {schema: {type: object, required: [to], properties: {to: {type: string}}}}
steps:
  - id: draft
    set: {subject: "'Hello'", body: "'Dear customer, buy now!!!'"}
  - id: review
    approval:
      approvers: [role:manager]
      quorum: QUORUM
      timeout: 24h
      show: "steps.draft.output"
      editable:
        schema:
          type: object
          required: [subject, body]
          additionalProperties: false
          properties: {subject: {type: string, maxLength: 80}, body: {type: string, maxLength: 2000}}
  - id: send
    action: t.send
    with: {to: "${{ input.to }}", subject: "${{ steps.review.output.show.subject }}",
           body: "${{ steps.review.output.show.body }}"}
"""


@pytest.fixture
def sent(registry):
    out = []

    @action("t.send", registry=registry, effect="write")
    def send(ctx, to, subject, body):
        out.append({"to": to, "subject": subject, "body": body})
        return {"sent": True}

    return out


@pytest.fixture
def rt(store, registry, sent):
    runtime = Runtime(store, registry, {}, rng=random.Random(3), worker_timeout_ms=20)
    yield runtime
    runtime.close()


def plan(quorum: int = 1):
    return compile_bytes(WORKFLOW.replace(b"QUORUM", str(quorum).encode()), "<outreach>")


EDITED = {"subject": "Hello", "body": "Dear customer, here is the offer we discussed."}


def test_an_approver_edits_the_draft_and_the_step_after_sends_the_edit(rt, sent):
    # Given a run waiting for a manager to review the drafted email
    waiting = rt.run(plan(), {"to": "c@example.com"}, initiator="user:a")
    assert waiting.state == "waiting" and waiting.waiting["show"]["body"] == "Dear customer, buy now!!!"
    # When the manager fixes the body and approves
    rt.approve(waiting.run.id, "review", actor="user:bob", edit=EDITED)
    done = rt.drive(waiting.run.id, until="final")
    # Then the email sent is the edited one, the approval binds to it, and the audit has before and after
    assert done.state == "completed" and sent == [{"to": "c@example.com", **EDITED}]
    review = [a for a in done.attempts if a.step_id == "review"][-1]
    assert review.output["show"] == EDITED and review.output["edited"]["by"] == "user:bob"
    (edited,) = [e for e in rt.audit(waiting.run.id) if e.event == "approval_edited"]
    assert edited.detail["before"]["body"] == "Dear customer, buy now!!!" and edited.detail["after"] == EDITED
    (granted,) = [e for e in rt.audit(waiting.run.id) if e.event == "approval_granted"]
    assert granted.detail["show_hash"] == edited.detail["after_hash"] != edited.detail["before_hash"]


def test_an_edit_failing_the_schema_is_refused_and_changes_nothing(rt, sent):
    waiting = rt.run(plan(), {"to": "c@example.com"}, initiator="user:a")
    with pytest.raises(InvalidOperation, match="does not pass its editable schema"):
        rt.approve(waiting.run.id, "review", actor="user:bob", edit={"subject": "x" * 81, "body": "b"})
    with pytest.raises(InvalidOperation, match="does not pass its editable schema"):
        rt.approve(waiting.run.id, "review", actor="user:bob", edit={"body": "no subject"})
    status = rt.status(waiting.run.id)
    assert status.state == "waiting" and status.waiting["show"]["body"] == "Dear customer, buy now!!!"
    assert sent == []


def test_with_a_quorum_an_edit_voids_the_approvals_of_the_value_before_and_the_next_approver_approves_the_edit(
        rt, sent):
    # Given a gate needing two managers, approved as drafted by bob
    waiting = rt.run(plan(quorum=2), {"to": "c@example.com"}, initiator="user:a")
    rt.approve(waiting.run.id, "review", actor="user:bob")
    # When cy edits the draft and approves: bob approved another payload, so his approval no longer counts
    after = rt.approve(waiting.run.id, "review", actor="user:cy", edit=EDITED)
    assert after.state == "waiting" and after.waiting["show"] == EDITED and after.waiting["edited_by"] == "user:cy"
    assert [a["actor"] for a in after.waiting["approvals"]] == ["user:cy"]
    # Then bob approves again, now the edited email, and it is sent
    rt.approve(waiting.run.id, "review", actor="user:bob")
    assert rt.drive(waiting.run.id, until="final").state == "completed"
    assert sent == [{"to": "c@example.com", **EDITED}]


def test_a_gate_that_is_not_editable_refuses_an_edit(rt, sent):
    text = WORKFLOW.replace(b"QUORUM", b"1").split(b"      editable:")[0] + b"""\
  - id: send
    action: t.send
    with: {to: "${{ input.to }}", subject: s, body: b}
"""
    waiting = rt.run(compile_bytes(text, "<plain>"), {"to": "c@example.com"}, initiator="user:a")
    with pytest.raises(InvalidOperation, match="is not editable"):
        rt.approve(waiting.run.id, "review", actor="user:bob", edit=EDITED)


def test_the_initiator_may_not_edit_its_own_runs_gate_and_nothing_changes(rt, sent):
    # Given alice's run at the review (separation of duties: she may not approve her own run)
    waiting = rt.run(plan(), {"to": "c@example.com"}, initiator="user:alice")
    # When she tries to approve it with her own edit
    with pytest.raises(Exception, match="initiator|separation"):
        rt.approve(waiting.run.id, "review", actor="user:alice", edit=EDITED)
    # Then the gate still shows the draft, unedited
    status = rt.status(waiting.run.id)
    assert status.waiting["show"]["body"] == "Dear customer, buy now!!!" and "edited_by" not in status.waiting
