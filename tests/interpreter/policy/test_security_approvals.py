"""Approvals that fail closed: approvers by principal or role, quorum, separation of duties, binding."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, make_plan
from security_helpers import events

from sealflow.execution.actions import action
from sealflow.policy.approvals import ApprovalVoid, show_hash
from sealflow.policy.authz import Unauthorized
from sealflow.store import InvalidOperation, NotFound


@pytest.fixture
def charges(registry):
    done = []

    @action("t.charge", registry=registry, permissions=["billing:charge"], effect="irreversible")
    def charge(ctx, amount=0):
        done.append(amount)
        return {"charged": amount}

    return done


def gated(approvers=("role:manager",), quorum=1, timeout_ms=3_600_000, version=1, **kw):
    return make_plan(
        S("ask", "approval", approval=approval(approvers=approvers, quorum=quorum, timeout_ms=timeout_ms,
                                               show="{'amount': input.amount, 'to': input.to}", **kw)),
        S("charge", "action", action="t.charge", args={"amount": "${{ input.amount }}"},
          permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge"),
        permissions=("billing:charge",), output="${{ steps.ask.output }}", version=version)


def waiting_run(rt, plan=None, initiator="user:alice", amount=40):
    status = rt.run(plan or gated(), {"amount": amount, "to": "acct_1"}, initiator=initiator, tenant="acme")
    assert status.state == "waiting"
    return status.run.id


def tamper(rt, sql, *args):
    with rt.store._lock:
        rt.store._conn.execute(sql, args)


def test_the_initiator_cannot_approve_or_reject_their_own_run(rt, charges):
    # Given alice's run waiting for a manager, and alice granted the manager role too
    run_id = waiting_run(rt)
    # When alice approves it
    with pytest.raises(Unauthorized, match="separation of duties"):
        rt.approve(run_id, actor="user:alice", tenant="acme")
    with pytest.raises(Unauthorized, match="cannot decide its approval"):
        rt.reject(run_id, actor="user:alice", tenant="acme", reason="mine")
    # Then nothing moved, and both refusals are audited
    assert rt.status(run_id).state == "waiting" and charges == []
    refused = events(rt, "approval_refused", run_id)
    assert [(e.actor, e.detail["decision"], e.detail["reason"]) for e in refused] == [
        ("user:alice", "approve", "separation_of_duties"), ("user:alice", "reject", "separation_of_duties")]


def test_a_non_approver_is_refused_and_audited(rt, charges):
    run_id = waiting_run(rt)
    with pytest.raises(Unauthorized, match="user:dan .* is not an approver"):
        rt.approve(run_id, actor="user:dan", tenant="acme")  # finance, not a manager
    assert events(rt, "approval_refused", run_id)[0].detail["reason"] == "not_an_approver"
    assert rt.status(run_id).waiting["approvals"] == []


def test_a_role_approver_is_resolved_through_the_policy(rt, policy, charges):
    run_id = waiting_run(rt)
    # bob holds role:manager in acme: his approval counts, as the role
    status = rt.approve(run_id, actor="user:bob", tenant="acme", comment="within budget")
    assert rt.drive(run_id).state == "completed" and charges == [40]
    (granted,) = events(rt, "approval_granted", run_id)
    assert granted.actor == "user:bob" and granted.detail["as"] == "role:manager"
    assert granted.detail["comment"] == "within budget"
    assert granted.detail["show_hash"] == show_hash({"amount": 40, "to": "acct_1"})
    assert granted.detail["plan_digest"] == status.run.plan_digest
    # and once the role is revoked, the same principal -- no longer a member of acme -- sees no run at all
    run_id = waiting_run(rt)
    policy.revoke("user:bob", "manager")
    with pytest.raises(NotFound, match="no run"):
        rt.approve(run_id, actor="user:bob", tenant="acme")
    assert [e.detail["reason"] for e in events(rt, "tenant_denied", run_id)] == ["not_a_member"]


def test_a_principal_approver_is_matched_exactly(rt, charges):
    run_id = waiting_run(rt, gated(approvers=("user:dan",)))
    with pytest.raises(Unauthorized):
        rt.approve(run_id, actor="user:bob", tenant="acme")
    rt.approve(run_id, actor="user:dan", tenant="acme")
    assert rt.drive(run_id).state == "completed"


def test_a_quorum_of_two_needs_two_distinct_principals(rt, charges):
    run_id = waiting_run(rt, gated(quorum=2))
    # the same principal twice counts once
    assert rt.approve(run_id, actor="user:bob", tenant="acme").state == "waiting"
    with pytest.raises(InvalidOperation, match="already approved"):
        rt.approve(run_id, actor="user:bob", tenant="acme")
    status = rt.status(run_id)
    assert status.state == "waiting" and len(status.waiting["approvals"]) == 1 and charges == []
    # a second distinct manager completes the quorum
    rt.approve(run_id, actor="user:cy", tenant="acme")
    status = rt.drive(run_id)
    assert status.state == "completed" and charges == [40]
    assert [a["actor"] for a in status.output["approvals"]] == ["user:bob", "user:cy"]
    assert [e.detail["count"] for e in events(rt, "approval_granted", run_id)] == [1, 2]


def test_a_rejection_needs_a_reason_and_is_audited_with_it(rt, charges):
    run_id = waiting_run(rt)
    with pytest.raises(InvalidOperation, match="needs a reason"):
        rt.reject(run_id, actor="user:bob", tenant="acme", reason="  ")
    rt.reject(run_id, actor="user:bob", tenant="acme", reason="wrong account")
    status = rt.drive(run_id)
    assert status.state == "failed" and status.error == ("policy_denied", "rejected by user:bob: wrong account")
    (rejected,) = events(rt, "approval_rejected", run_id)
    assert rejected.actor == "user:bob" and rejected.detail["reason"] == "wrong account"
    assert rejected.detail["show_hash"].startswith("sha256:") and charges == []


def test_an_expired_approval_rejects_fails_closed_and_cannot_be_approved_late(rt, clock, charges):
    run_id = waiting_run(rt, gated(timeout_ms=60_000))
    clock.advance(61)
    # an approval arriving after the deadline, before the sweeper processed it, is refused
    with pytest.raises(InvalidOperation, match="expired"):
        rt.approve(run_id, actor="user:bob", tenant="acme")
    assert events(rt, "approval_refused", run_id)[0].detail["reason"] == "expired"
    # and the timeout rejects: the step fails policy_denied, the charge never runs
    status = rt.drive(run_id)
    assert status.state == "failed" and status.error[0] == "policy_denied" and "fails closed" in status.error[1]
    assert charges == []
    (expired,) = [e for e in events(rt, "step.detail", run_id) if e.detail.get("decision") == "approval_expired"]
    assert expired.detail["show_hash"].startswith("sha256:") and "fails closed" in expired.detail["why"]


def test_a_show_payload_changed_after_an_approval_voids_it(rt, charges):
    # Given a quorum of two, one approval given while the payload said 40 to acct_1
    run_id = waiting_run(rt, gated(quorum=2))
    rt.approve(run_id, actor="user:bob", tenant="acme")
    before = rt.status(run_id).waiting
    # When the run's input is changed behind the gate's back (a store edit)
    tamper(rt, "UPDATE runs SET input = ? WHERE id = ?", '{"amount": 4000, "to": "acct_evil"}', run_id)
    # Then the next decision finds the binding broken: the approval is void and the gate re-opened
    with pytest.raises(ApprovalVoid, match="the approved payload changed"):
        rt.approve(run_id, actor="user:cy", tenant="acme")
    after = rt.status(run_id)
    assert after.state == "waiting" and after.waiting["approvals"] == []
    assert after.waiting["show"] == {"amount": 4000, "to": "acct_evil"}
    (void,) = events(rt, "approval_void", run_id)
    assert void.detail["voided"] == ["user:bob"]
    assert void.detail["changed"]["show_hash"] == {"recorded": show_hash(before["show"]),
                                                   "now": show_hash({"amount": 4000, "to": "acct_evil"})}
    assert charges == []
    # And only a full quorum on the new payload lets the run on
    rt.approve(run_id, actor="user:cy", tenant="acme")
    assert rt.drive(run_id).state == "waiting" and charges == []
    rt.approve(run_id, actor="user:bob", tenant="acme")
    assert rt.drive(run_id).state == "completed" and charges == [4000]


def test_a_show_payload_changed_before_the_only_approval_voids_it(rt, charges):
    run_id = waiting_run(rt)
    tamper(rt, "UPDATE runs SET input = ? WHERE id = ?", '{"amount": 9, "to": "acct_1"}', run_id)
    with pytest.raises(ApprovalVoid):
        rt.approve(run_id, actor="user:bob", tenant="acme")
    assert rt.status(run_id).state == "waiting" and charges == []


def test_a_plan_digest_changed_under_the_gate_voids_the_approval(rt, charges):
    run_id = waiting_run(rt, gated(quorum=2))
    rt.approve(run_id, actor="user:bob", tenant="acme")
    other = gated(quorum=2, version=2)
    rt.store.put_plan(other.digest, other.name, other.version, other.to_json(), 0.0)
    tamper(rt, "UPDATE runs SET plan_digest = ? WHERE id = ?", other.digest, run_id)
    with pytest.raises(ApprovalVoid, match="the plan changed"):
        rt.approve(run_id, actor="user:cy", tenant="acme")
    (void,) = events(rt, "approval_void", run_id)
    assert void.detail["changed"]["plan_digest"]["now"] == other.digest
    assert rt.status(run_id).waiting["approvals"] == [] and charges == []


def test_a_tampered_approval_record_voids_the_gate(rt, charges):
    run_id = waiting_run(rt, gated(quorum=2))
    rt.approve(run_id, actor="user:bob", tenant="acme")
    att = rt.store.active_attempt(run_id)
    data = dict(att.data)
    data["approvals"] = [dict(data["approvals"][0], show_hash="sha256:" + "0" * 64)]
    import json

    tamper(rt, "UPDATE attempts SET data = ? WHERE run_id = ? AND step_id = ? AND attempt = ?", json.dumps(data),
           run_id, att.step_id, att.attempt)
    with pytest.raises(ApprovalVoid):
        rt.approve(run_id, actor="user:cy", tenant="acme")


def test_approvals_list_shows_what_waits_for_the_caller(rt, policy, charges):
    policy.grant("user:bob", "buyer")
    mine = waiting_run(rt)                                    # alice's, for managers
    bobs = waiting_run(rt, initiator="user:bob")              # bob started this one himself
    named = waiting_run(rt, gated(approvers=("user:dan",)))  # for dan by name
    other = rt.run(gated(), {"amount": 1, "to": "x"}, initiator="user:eve", tenant="globex").run.id
    # bob (role:manager) sees alice's run, not his own (separation of duties), not dan's, not globex's
    assert [w["run_id"] for w in rt.approvals_waiting("user:bob", "acme")] == [mine]
    (w,) = rt.approvals_waiting("user:cy", "acme")[:1]
    assert w["as"] == "role:manager" and w["show"] == {"amount": 40, "to": "acct_1"} and w["quorum"] == 1
    assert {x["run_id"] for x in rt.approvals_waiting("user:cy", "acme")} == {mine, bobs}
    assert [x["run_id"] for x in rt.approvals_waiting("user:dan", "acme")] == [named]
    assert rt.approvals_waiting("user:bob", "globex") == []
    assert [x["run_id"] for x in rt.approvals_waiting("user:gus", "globex")] == [other]
    # once bob approved, it no longer waits for him
    rt.approve(mine, actor="user:bob", tenant="acme")
    assert rt.approvals_waiting("user:bob", "acme") == []


def test_in_open_development_mode_anyone_holds_any_role_but_duties_stay_separated(runtime, charges):
    status = runtime.run(gated(), {"amount": 1, "to": "x"}, initiator="user:ana")
    with pytest.raises(Unauthorized, match="separation of duties"):
        runtime.approve(status.run.id, actor="user:ana")
    assert [w["run_id"] for w in runtime.approvals_waiting("user:zed", "default")] == [status.run.id]
    runtime.approve(status.run.id, actor="user:zed")
    assert runtime.drive(status.run.id).state == "completed"
