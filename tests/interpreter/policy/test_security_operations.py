"""Run operations authorise the principal, not the tenant it names (issue 9, defect 2).

Every Runtime operation takes the acting principal (``actor=``): it must be a member of the run's tenant
holding the operation's permission (runs:read, runs:cancel, dlq:read, dlq:redrive, audit:read), or be the
run's initiator (read, cancel), or an operator of the policy. A denial reads like an unknown run id and is
audited once (tenant_denied / operation_denied)."""

from __future__ import annotations

import pytest
from interp_helpers import S, approval, gate, make_plan
from security_helpers import PolicyFile, events, secured_runtime

from sealflow.execution.actions import action
from sealflow.policy.access import AccessPolicyError, FileAccess, OpenAccess
from sealflow.policy.authz import Unauthorized
from sealflow.store import InvalidOperation, NotFound


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


def waiting(rt) -> str:
    status = rt.run(gated(), {"amount": 40}, initiator="user:alice", tenant="acme")
    assert status.state == "waiting"
    return status.run.id


def dead(rt) -> str:
    run_id = waiting(rt)
    rt.reject(run_id, actor="user:bob", tenant="acme", reason="no")
    assert rt.drive(run_id).state == "failed"
    return run_id


def unknown(rt, run_id: str) -> str:
    with pytest.raises(NotFound) as exc:
        rt.status("run_doesnotexist")
    return str(exc.value).replace("run_doesnotexist", run_id)


OPERATIONS = {
    "status": lambda rt, r, who, t: rt.status(r, actor=who, tenant=t),
    "audit": lambda rt, r, who, t: rt.audit(r, actor=who, tenant=t),
    "dlq_show": lambda rt, r, who, t: rt.dlq_show(r, actor=who, tenant=t),
    "cancel": lambda rt, r, who, t: rt.cancel(r, actor=who, tenant=t),
    "dlq_redrive": lambda rt, r, who, t: rt.dlq_redrive(r, actor=who, tenant=t),
    "approve": lambda rt, r, who, t: rt.approve(r, actor=who, tenant=t),
    "reject": lambda rt, r, who, t: rt.reject(r, actor=who, tenant=t, reason="no"),
}
#: the runs each operation is tried on: a waiting run, or a dead letter for the dead-letter operations
ON_DEAD = {"dlq_show", "dlq_redrive"}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("claimed", ["acme", None], ids=["naming-acme", "naming-nothing"])
def test_an_outsider_naming_the_runs_tenant_is_told_there_is_no_such_run(rt, charges, operation, claimed):
    # Given a run of acme; When zed, a member of no tenant, acts on it -- even naming acme as his tenant
    run_id = dead(rt) if operation in ON_DEAD else waiting(rt)
    before = rt.status(run_id)
    with pytest.raises(NotFound) as refused:
        OPERATIONS[operation](rt, run_id, "user:zed", claimed)
    # Then the answer is word for word the one for an unknown run, nothing changed, and it is audited once
    assert str(refused.value) == unknown(rt, run_id)
    after = rt.status(run_id)
    assert after.state == before.state and len(after.attempts) == len(before.attempts) and charges == []
    (denied,) = events(rt, "tenant_denied", run_id)
    assert denied.actor == "user:zed" and denied.detail["reason"] == "not_a_member"
    assert denied.detail["operation"] in {"runs:read", "runs:cancel", "runs:decide", "dlq:read", "dlq:redrive",
                                          "audit:read"}


@pytest.mark.parametrize(("operation", "permission"), [("status", "runs:read"), ("audit", "audit:read"),
                                                       ("dlq_show", "dlq:read"), ("cancel", "runs:cancel"),
                                                       ("dlq_redrive", "dlq:redrive")])
def test_a_member_without_the_permission_is_told_there_is_no_such_run(rt, charges, operation, permission):
    # dan is a member of acme (finance) but holds none of the run permissions, and did not start the run
    run_id = dead(rt) if operation in ON_DEAD else waiting(rt)
    with pytest.raises(NotFound) as refused:
        OPERATIONS[operation](rt, run_id, "user:dan", "acme")
    assert str(refused.value) == unknown(rt, run_id)
    (denied,) = events(rt, "operation_denied", run_id)
    assert denied.actor == "user:dan" and denied.detail == {"operation": permission, "tenant": "acme",
                                                            "reason": "missing_permission"}
    assert events(rt, "tenant_denied", run_id) == []


def test_the_initiator_reads_and_cancels_its_own_run_but_not_its_audit(rt, charges):
    run_id = waiting(rt)
    assert rt.status(run_id, actor="user:alice").state == "waiting"
    with pytest.raises(NotFound):
        rt.audit(run_id, actor="user:alice")
    assert rt.cancel(run_id, actor="user:alice", reason="changed my mind").state in ("cancelled", "cancelling")
    assert rt.drive(run_id).state == "cancelled"


def test_an_initiator_who_left_the_tenant_no_longer_sees_its_run(rt, policy, charges):
    run_id = waiting(rt)
    policy.revoke("user:alice", "buyer")
    with pytest.raises(NotFound):
        rt.status(run_id, actor="user:alice", tenant="acme")
    assert events(rt, "tenant_denied", run_id)[0].detail["reason"] == "not_a_member"


def test_members_with_the_permissions_operate_as_usual(rt, charges):
    run_id = dead(rt)
    assert rt.status(run_id, actor="user:ida", tenant="acme").state == "failed"
    assert rt.audit(run_id, actor="user:ida")[0].event == "run.created"
    assert rt.dlq_show(run_id, actor="user:ida")["run"]["id"] == run_id
    assert [d.run_id for d in rt.dlq_list(actor="user:ida")] == [run_id]
    with pytest.raises(NotFound):
        rt.dlq_redrive(run_id, actor="user:ida")  # reading is not redriving
    assert rt.dlq_redrive(run_id, actor="user:ops", tenant="acme").state != "failed"
    assert events(rt, "tenant_denied") == [] and len(events(rt, "operation_denied")) == 1


def test_an_operator_named_in_the_policy_operates_every_tenant_but_approves_nothing(tmp_path, registry, clock, charges):
    policy = PolicyFile(tmp_path / "ops.yaml")
    policy.path.write_text(policy.path.read_text() + "operators: [user:root]\n")
    runtime = secured_runtime(tmp_path, registry, clock, policy, name="ops.db")
    try:
        run_id = waiting(runtime)
        assert runtime.status(run_id, actor="user:root").state == "waiting"
        assert runtime.audit(run_id, actor="user:root")
        # approving needs to be one of the gate's approvers: the operator sees the run, the gate refuses it
        with pytest.raises(Unauthorized, match="not an approver"):
            runtime.approve(run_id, actor="user:root")
        assert runtime.cancel(run_id, actor="user:root").state in ("cancelled", "cancelling")
        assert events(runtime, "tenant_denied") == []
    finally:
        runtime.close()
        runtime.store.close()


def test_the_policy_names_operators_with_principals_only(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("operators: [root]\ntenants: {}\n")
    with pytest.raises(AccessPolicyError, match="operators"):
        FileAccess(bad)
    good = tmp_path / "good.yaml"
    good.write_text("operators: [user:root]\ntenants: {}\n")
    assert FileAccess(good).is_operator("user:root") and not FileAccess(good).is_operator("user:alice")


def test_open_development_mode_allows_every_operation(runtime, charges):
    from sealflow.policy.operations import Operation, may

    # Given a run on a runtime without an access policy; When anyone acts on it, it is allowed (as recorded)
    run_id = runtime.run(gated(), {"amount": 1}, initiator="user:alice", tenant="acme").run.id
    assert runtime.status(run_id, actor="user:zed").run.access_mode == "open-development"
    assert runtime.audit(run_id, actor="user:zed")
    for operation in Operation:
        assert may(runtime.access, runtime.store.get_run(run_id), "user:zed", operation).via == "open-development"
    assert isinstance(runtime.access, OpenAccess)


def test_trusted_in_process_callers_without_an_actor_work_as_before(rt, charges):
    run_id = dead(rt)
    assert rt.status(run_id).state == "failed" and rt.audit(run_id) and rt.dlq_show(run_id)
    assert len(rt.dlq_list()) == 1
    # a tenant claim still narrows them
    with pytest.raises(NotFound):
        rt.status(run_id, tenant="globex")


def test_recover_names_only_runs_the_caller_may_read(rt, charges):
    acme_run = rt.submit(gated(), {"amount": 1}, initiator="user:alice", tenant="acme")
    globex_run = rt.submit(gated(), {"amount": 2}, initiator="user:eve", tenant="globex")
    as_eve = rt.recover(actor="user:eve", tenant="globex")
    assert acme_run not in as_eve["runs_in_flight"] + as_eve["runs_repaired"]
    assert globex_run in as_eve["runs_in_flight"]
    as_zed = rt.recover(actor="user:zed", tenant="acme")
    assert as_zed["runs_in_flight"] == [] and as_zed["runs_repaired"] == []
    assert {acme_run, globex_run} <= set(rt.recover()["runs_in_flight"])  # trusted code sees all


def test_dlq_show_carries_the_audit_tail_only_for_who_may_read_audit_trails(rt, policy, charges):
    run_id = dead(rt)
    assert rt.dlq_show(run_id, actor="user:ida")["audit"]  # auditor: dlq:read and audit:read
    policy.tenants["acme"]["roles"]["dlq-reader"] = ["dlq:read"]
    policy.grant("user:dan", "dlq-reader")
    shown = rt.dlq_show(run_id, actor="user:dan")
    assert shown["run"]["id"] == run_id and shown["audit"] is None


def test_the_dead_letter_list_shows_only_what_the_caller_may_read(rt, charges):
    run_id = dead(rt)
    assert rt.dlq_list(tenant="acme", actor="user:zed") == []
    assert rt.dlq_list(tenant="acme", actor="user:dan") == []  # a member without dlq:read
    assert [d.run_id for d in rt.dlq_list(tenant="acme", actor="user:ida")] == [run_id]


def test_cancelling_an_ended_run_is_a_refusal_audited_once(rt, charges):
    run_id = waiting(rt)
    rt.approve(run_id, actor="user:bob")
    assert rt.drive(run_id).state == "completed"
    with pytest.raises(InvalidOperation, match=r"has already ended \(completed\)"):
        rt.cancel(run_id, actor="user:alice")
    assert [e.detail for e in events(rt, "cancel_refused", run_id)] == [{"state": "completed"}]
    assert rt.status(run_id).state == "completed"


def test_cancelling_a_cancelled_run_says_so(rt, charges):
    run_id = waiting(rt)
    rt.cancel(run_id, actor="user:alice")
    assert rt.drive(run_id).state == "cancelled"
    with pytest.raises(InvalidOperation, match="is already cancelled"):
        rt.cancel(run_id, actor="user:alice")


def test_approvals_waiting_is_empty_for_a_non_member_named_as_approver(rt, charges):
    plan = make_plan(S("ask", "approval", approval=approval(approvers=("user:zed",), show="input")),
                     S("charge", "action", action="t.charge", args={"amount": 1}, permissions=("billing:charge",)),
                     permissions=("billing:charge",))
    rt.run(plan, {"amount": 1}, initiator="user:alice", tenant="acme")
    assert rt.approvals_waiting("user:zed", "acme") == []


def test_approvals_waiting_carries_the_input_and_what_the_gate_shows(rt, charges):
    run_id = waiting(rt)
    (gate_,) = rt.approvals_waiting("user:bob", "acme")
    assert gate_["run_id"] == run_id and gate_["input"] == {"amount": 40} and gate_["show"] == {"amount": 40}


def test_a_gate_opened_by_requires_approval_if_shows_the_steps_arguments(rt, charges):
    plan = make_plan(S("charge", "action", action="t.charge", args={"amount": "${{ input.amount }}"},
                       permissions=("billing:charge",), requires_approval_if="output.charged > 10",
                       gate=gate(approvers=("role:manager",))),
                     permissions=("billing:charge",))
    status = rt.run(plan, {"amount": 40}, initiator="user:alice", tenant="acme")
    assert status.state == "waiting" and status.waiting["show"] == {"step": "charge", "args": {"amount": 40}}
    (listed,) = rt.approvals_waiting("user:bob", "acme")
    assert listed["show"] == {"step": "charge", "args": {"amount": 40}}
    rt.approve(status.run.id, actor="user:bob")
    assert rt.drive(status.run.id).state == "completed"


def test_recover_leaves_a_run_it_cannot_continue_and_names_it_only_to_who_may_read_it(rt, charges, registry):
    # Given a run of acme this process can continue, and one of globex whose action this process no longer has
    acme_run = rt.submit(gated(), {"amount": 1}, initiator="user:alice", tenant="acme")
    other = make_plan(S("go", "action", action="t.gone"))

    @action("t.gone", registry=registry, effect="read")
    def gone(ctx):
        return {}

    globex_run = rt.submit(other, {}, initiator="user:eve", tenant="globex")
    registry._actions.pop("t.gone")
    # When user:alice recovers acme's runs (leaving what this process cannot continue)
    as_alice = rt.recover(actor="user:alice", tenant="acme", leave_unready=True)
    # Then acme's run is driven on, globex's is left unnamed: counted, with what it needs
    assert acme_run in as_alice["runs_in_flight"] and rt.drive(acme_run).state == "waiting"
    assert as_alice["runs_left"] == [] and as_alice["runs_left_unreadable"] == 1
    assert as_alice["lacks_unreadable"] == [["action", "t.gone"]]
    assert rt.store.get_run(globex_run).state == "queued"
    # And user:eve, who may read it, sees it named with what it lacks and how to provide it
    as_eve = rt.recover(actor="user:eve", tenant="globex", leave_unready=True)
    assert [(e["run_id"], e["lacks"]) for e in as_eve["runs_left"]] == [(globex_run, [["action", "t.gone"]])]
    assert "--actions MODULE" in as_eve["runs_left"][0]["how"][0] and as_eve["runs_left_unreadable"] == 0
