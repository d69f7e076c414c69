"""Tenant isolation and worker-side checks: another tenant's run does not exist for you; forged messages do nothing."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, make_plan
from security_helpers import events

from sealflow.execution.actions import action
from sealflow.store import Message, NotFound


@pytest.fixture
def charges(registry):
    done = []

    @action("t.charge", registry=registry, permissions=["billing:charge"], effect="irreversible")
    def charge(ctx, amount=0):
        done.append((ctx.tenant, amount))
        return {"charged": amount}

    return done


def gated():
    return make_plan(S("ask", "approval", approval=approval(approvers=("role:manager",), show="input")),
                     S("charge", "action", action="t.charge", args={"amount": "${{ input.amount }}"},
                       permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge"),
                     permissions=("billing:charge",))


@pytest.fixture
def acme_run(rt, charges):
    status = rt.run(gated(), {"amount": 40}, initiator="user:alice", tenant="acme")
    assert status.state == "waiting"
    return status.run.id


def unknown_message(rt) -> str:
    with pytest.raises(NotFound) as unknown:
        rt.status("run_doesnotexist", tenant="globex")
    return str(unknown.value).replace("run_doesnotexist", "{}")


@pytest.mark.parametrize(("operation", "permission"), [("status", "runs:read"), ("audit", "audit:read"),
                                                       ("dlq_show", "dlq:read")])
def test_another_tenant_reading_a_run_is_told_it_does_not_exist(rt, acme_run, operation, permission):
    # Given a run of acme; When eve, of globex, reads it
    with pytest.raises(NotFound) as refused:
        getattr(rt, operation)(acme_run, tenant="globex", actor="user:eve")
    # Then the answer is word for word the one for a run that does not exist
    assert str(refused.value) == unknown_message(rt).format(acme_run)
    # And the attempt is audited
    (denied,) = events(rt, "tenant_denied", acme_run)
    assert denied.actor == "user:eve" and denied.detail == {"tenant": "globex", "operation": permission,
                                                            "reason": "another_tenant"}


@pytest.mark.parametrize("decide", [
    lambda rt, run_id: rt.approve(run_id, actor="user:gus", tenant="globex"),
    lambda rt, run_id: rt.reject(run_id, actor="user:gus", tenant="globex", reason="no"),
    lambda rt, run_id: rt.cancel(run_id, actor="user:gus", tenant="globex"),
    lambda rt, run_id: rt.dlq_redrive(run_id, actor="user:gus", tenant="globex"),
], ids=["approve", "reject", "cancel", "redrive"])
def test_another_tenant_deciding_on_a_run_is_refused_as_not_found(rt, acme_run, charges, decide):
    # gus is a manager -- of globex. When he acts on acme's run
    with pytest.raises(NotFound) as refused:
        decide(rt, acme_run)
    # Then it is as if the run did not exist, nothing changed, and the attempt is audited
    assert str(refused.value) == unknown_message(rt).format(acme_run)
    status = rt.status(acme_run, tenant="acme")
    assert status.state == "waiting" and status.waiting["approvals"] == [] and charges == []
    assert [e.actor for e in events(rt, "tenant_denied", acme_run)] == ["user:gus"]


def test_the_owning_tenant_reads_and_decides_as_usual(rt, acme_run, charges):
    assert rt.status(acme_run, tenant="acme", actor="user:ida").state == "waiting"
    assert rt.audit(acme_run, tenant="acme")[0].event == "run.created"
    rt.approve(acme_run, actor="user:bob", tenant="acme")
    assert rt.drive(acme_run).state == "completed" and charges == [("acme", 40)]
    assert events(rt, "tenant_denied") == []


def test_the_dead_letter_list_is_per_tenant(rt, charges):
    for tenant, who in (("acme", "user:alice"), ("globex", "user:eve")):
        run_id = rt.run(gated(), {"amount": 1}, initiator=who, tenant=tenant).run.id
        rt.reject(run_id, actor="user:bob" if tenant == "acme" else "user:gus", tenant=tenant, reason="no")
        rt.drive(run_id)
    assert {rt.store.get_run(d.run_id).tenant for d in rt.dlq_list(tenant="acme")} == {"acme"}
    assert len(rt.dlq_list(tenant="globex")) == 1 and len(rt.dlq_list()) == 2


def test_a_forged_message_naming_another_tenant_is_refused_and_audited(rt, charges, policy):
    # Given a run of acme whose next step is due, with a valid message for it (right token and all)
    plan = make_plan(S("charge", "action", action="t.charge", args={"amount": 7},
                       permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge"),
                     permissions=("billing:charge",))
    run_id = rt.submit(plan, {}, initiator="user:alice", tenant="acme")
    (real,) = rt.store.take_outbox(rt.clock.now())
    assert real.tenant == "acme"  # the message carries ids only, the tenant among them
    # When the same message arrives naming globex, or naming no tenant
    assert rt.engine.handle(*real._replace(tenant="globex")).messages == ()
    assert rt.engine.handle(*real[:4]).messages == ()
    # Then neither ran, both are audited, and the attempt is still there for the genuine message
    assert charges == []
    refused = [e.detail for e in events(rt, "message_refused", run_id)]
    assert [(r["reason"], r.get("tenant")) for r in refused] == [("tenant_mismatch", "globex"),
                                                                ("tenant_mismatch", "")]
    rt.engine.handle(*real)
    assert charges == [("acme", 7)]


def test_a_forged_message_is_refused_by_the_worker_actor_too(rt, charges):
    plan = make_plan(S("charge", "action", action="t.charge", args={"amount": 7},
                       permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge"),
                     permissions=("billing:charge",))
    rt.start()  # the in-process worker, before the run exists (nothing to recover)
    run_id = rt.submit(plan, {}, initiator="user:alice", tenant="acme")
    (real,) = rt.store.take_outbox(rt.clock.now())
    rt.actor.send(*Message(real.run_id, real.step_id, real.attempt, real.token, "globex"))
    rt._join()
    assert charges == [] and events(rt, "message_refused", run_id)[0].detail["reason"] == "tenant_mismatch"
    assert rt.store.active_attempt(run_id).state == "scheduled"
