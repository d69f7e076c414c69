"""Reauthorisation: right before a sensitive step, the run's acting identity must still hold its permissions."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, make_plan, retry
from security_helpers import events

from sealflow.execution.actions import action


@pytest.fixture
def effects(registry):
    done = []

    @action("t.charge", registry=registry, permissions=["billing:charge"], effect="irreversible")
    def charge(ctx, amount=0):
        done.append(("charge", amount))
        return {"charged": amount}

    @action("t.lookup", registry=registry, permissions=["crm:read"], effect="read")
    def lookup(ctx):
        done.append(("lookup", None))
        return {"found": True}

    return done


def approve_then_charge(trigger=None, **step):
    return make_plan(
        S("ask", "approval", approval=approval(approvers=("role:manager",), show="input")),
        S("charge", "action", action="t.charge", args={"amount": "${{ input.amount }}"},
          permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge",
          retry=retry("unavailable", max_attempts=5), **step),
        permissions=("billing:charge", "crm:read"), trigger=trigger)


def test_a_permission_revoked_while_the_run_waits_denies_the_sensitive_step(rt, policy, effects):
    # Given alice's run waiting at an approval before a charge
    status = rt.run(approve_then_charge(), {"amount": 40}, initiator="user:alice", tenant="acme")
    assert status.state == "waiting"
    # When her role is revoked in the policy file (no restart) and a manager then approves
    policy.revoke("user:alice", "buyer")
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    status = rt.drive(status.run.id)
    # Then the charge is denied before it runs: its effect is absent, it was not retried, the run failed
    assert effects == []
    assert status.state == "failed" and status.error[0] == "unauthorized"
    assert "user:alice is no longer a member of tenant 'acme'" in status.error[1]
    assert [a.state for a in status.attempts if a.step_id == "charge"] == ["failed"]
    # And the denial is audited with who, what and what was missing
    (denied,) = events(rt, "reauthorization_denied", status.run.id)
    assert denied.step_id == "charge" and denied.actor == "user:alice"
    assert denied.detail["missing"] == ["billing:charge"] and denied.detail["effect"] == "irreversible"
    # And the run is in the dead-letter list like any failed run (compensation follows from there)
    assert rt.store.dead_letter(status.run.id).error_class == "unauthorized"


def test_a_narrower_role_still_lacking_the_step_permission_is_denied(rt, policy, effects):
    status = rt.run(approve_then_charge(), {"amount": 40}, initiator="user:alice", tenant="acme")
    policy.revoke("user:alice", "buyer")
    policy.grant("user:alice", "manager")  # still a member, but without billing:charge
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    status = rt.drive(status.run.id)
    assert effects == [] and status.error[0] == "unauthorized"
    assert "user:alice no longer holds billing:charge in tenant 'acme'" in status.error[1]


def test_permissions_still_held_let_the_step_run(rt, policy, effects):
    status = rt.run(approve_then_charge(), {"amount": 40}, initiator="user:alice", tenant="acme")
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    assert rt.drive(status.run.id).state == "completed" and effects == [("charge", 40)]
    assert events(rt, "reauthorization_denied") == []


def test_read_steps_are_not_reauthorised_by_default(rt, policy, effects):
    plan = make_plan(S("ask", "approval", approval=approval(approvers=("role:manager",))),
                     S("look", "action", action="t.lookup", permissions=("crm:read",)),
                     permissions=("billing:charge", "crm:read"))
    status = rt.run(plan, {}, initiator="user:alice", tenant="acme")
    policy.revoke("user:alice", "buyer")
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    assert rt.drive(status.run.id).state == "completed" and effects == [("lookup", None)]


def test_reauthorize_true_checks_any_step_and_false_opts_out(rt, policy, effects):
    plan = make_plan(S("ask", "approval", approval=approval(approvers=("role:manager",))),
                     S("look", "action", action="t.lookup", permissions=("crm:read",), reauthorize=True),
                     permissions=("billing:charge", "crm:read"))
    status = rt.run(plan, {}, initiator="user:alice", tenant="acme")
    policy.revoke("user:alice", "buyer")
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    assert rt.drive(status.run.id).error[0] == "unauthorized" and effects == []
    # an author may opt a write step out (lint flags it); then it runs on the submit-time decision
    policy.grant("user:alice", "buyer")
    status = rt.run(approve_then_charge(reauthorize=False), {"amount": 2}, initiator="user:alice", tenant="acme")
    policy.revoke("user:alice", "buyer")
    rt.approve(status.run.id, actor="user:bob", tenant="acme")
    assert rt.drive(status.run.id).state == "completed" and effects == [("charge", 2)]


def test_a_scheduled_run_is_reauthorised_as_its_run_as_service(rt, policy, effects):
    plan = approve_then_charge(trigger={"schedule": {"cron": "@daily", "run_as": "service:nightly"}})
    run_id = rt.submit(plan, {"amount": 9}, initiator="service:scheduler", tenant="acme", run_as="service:nightly")
    rt.drive(run_id)
    policy.revoke("service:nightly", "buyer")
    rt.approve(run_id, actor="user:bob", tenant="acme")
    status = rt.drive(run_id)
    assert effects == [] and status.error[0] == "unauthorized" and "service:nightly" in status.error[1]
