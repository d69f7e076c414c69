"""Principals, the access policy and submit authorisation: a job existing is not a permission to act."""

from __future__ import annotations

import os
import time

import pytest
from interp_helpers import S, make_plan
from security_helpers import PolicyFile, events

from sealflow.execution.actions import action
from sealflow.policy.access import (
    OPEN_DEVELOPMENT,
    AccessPolicyError,
    FileAccess,
    OpenAccess,
    PolicyAccess,
    check_principal,
    holds,
    load_access_policy,
    missing,
)
from sealflow.policy.authz import Unauthorized


@pytest.fixture
def charges(registry):
    done = []

    @action("t.charge", registry=registry, permissions=["billing:charge"], effect="irreversible")
    def charge(ctx, amount=0):
        done.append(amount)
        return {"charged": amount}

    return done


def charge_plan(**kw):
    return make_plan(S("charge", "action", action="t.charge", args={"amount": "${{ input.amount }}"},
                       permissions=("billing:charge",), idempotency_key="${{ run.id }}:charge"),
                     permissions=("billing:charge", "crm:read"), **kw)


def test_an_outsider_submits_and_is_refused_nothing_created_and_audited(rt, charges):
    # Given a workflow that charges, and a principal who is no member of tenant acme
    # When they submit it
    with pytest.raises(Unauthorized) as refused:
        rt.submit(charge_plan(), {"amount": 5}, initiator="user:mallory", tenant="acme")
    # Then the refusal is unauthorized and names what is missing
    assert refused.value.error_class == "unauthorized"
    assert "user:mallory is not a member of tenant 'acme'" in refused.value.message
    assert set(refused.value.missing) == {"billing:charge", "crm:read"}
    # And nothing was created: no run, no plan, no effect
    assert rt.store.list_runs() == [] and charges == []
    assert rt.store._read("SELECT COUNT(*) FROM plans")[0][0] == 0
    # And the refusal is audited without a run id, with who, where, what and what was missing
    (denied,) = events(rt, "submit_denied", run_id=None)
    assert denied.actor == "user:mallory"
    assert denied.detail["tenant"] == "acme" and denied.detail["workflow"] == "test-flow"
    assert set(denied.detail["missing"]) == {"billing:charge", "crm:read"}


def test_a_member_missing_a_permission_is_refused_naming_it(rt, charges):
    # Given bob, a manager of acme (crm:read, not billing:charge)
    with pytest.raises(Unauthorized, match="missing permission billing:charge") as refused:
        rt.submit(charge_plan(), {"amount": 5}, initiator="user:bob", tenant="acme")
    assert refused.value.missing == ("billing:charge",)
    assert rt.store.list_runs() == []
    assert events(rt, "submit_denied", run_id=None)[0].detail["reason"] == "missing_permissions"


def test_a_member_of_another_tenant_is_an_outsider_here(rt, charges):
    # eve buys in globex, not in acme
    with pytest.raises(Unauthorized, match="not a member of tenant 'acme'"):
        rt.submit(charge_plan(), {"amount": 5}, initiator="user:eve", tenant="acme")
    run_id = rt.submit(charge_plan(), {"amount": 5}, initiator="user:eve", tenant="globex")
    assert rt.store.get_run(run_id).tenant == "globex"


def test_a_caller_holding_every_permission_gets_a_run_that_records_who_it_acts_as(rt, charges):
    status = rt.run(charge_plan(), {"amount": 5}, initiator="user:alice", tenant="acme")
    assert (status.state, status.error, charges) == ("completed", (None, None), [5])
    run = status.run
    assert (run.initiator, run.acting_as, run.access_mode) == ("user:alice", "user:alice", "policy")
    (created,) = events(rt, "run.created", run.id)
    assert created.detail["access"] == "policy"


def test_open_development_mode_is_recorded_on_the_run(runtime, charges):
    # Given the embedded default with no access policy
    assert runtime.access.mode == OPEN_DEVELOPMENT and "open development mode" in runtime.access.describe()
    # When anyone submits
    status = runtime.run(charge_plan(), {"amount": 1}, initiator="user:anyone", tenant="acme")
    # Then it runs, and the run and its audit say it ran in open development mode
    assert status.state == "completed"
    assert status.run.access_mode == "open-development"
    (created,) = [e for e in runtime.audit(status.run.id) if e.event == "run.created"]
    assert created.detail["access"] == "open-development"


def test_a_scheduled_run_acts_as_its_run_as_service(rt, charges):
    plan = charge_plan(trigger={"schedule": {"cron": "0 6 * * *", "timezone": "UTC", "run_as": "service:nightly"}})
    # the scheduler (who holds nothing itself) submits on the schedule's behalf
    run_id = rt.submit(plan, {"amount": 3}, initiator="service:scheduler", tenant="acme", run_as="service:nightly")
    assert rt.store.get_run(run_id).acting_as == "service:nightly"
    # a run_as the definition does not declare is refused
    with pytest.raises(Unauthorized, match="declares no schedule running as service:other"):
        rt.submit(plan, {"amount": 3}, initiator="service:scheduler", tenant="acme", run_as="service:other")


def test_a_revocation_in_the_policy_file_takes_effect_at_the_next_submit(rt, policy, charges):
    rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")
    policy.revoke("user:alice", "buyer")
    with pytest.raises(Unauthorized):
        rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")
    policy.grant("user:alice", "buyer")
    rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")


def test_a_policy_file_broken_after_start_denies_everything(rt, policy, charges):
    policy.path.write_text("tenants: [oops\n")
    with pytest.raises(Unauthorized, match="access policy cannot be used"):
        rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")
    policy.path.unlink()
    with pytest.raises(Unauthorized, match="cannot be read"):
        rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")
    policy.save()
    rt.submit(charge_plan(), {"amount": 1}, initiator="user:alice", tenant="acme")


def test_an_invalid_policy_file_reports_every_problem_located(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tenants:\n  acme:\n    roles: {buyer: [Billing]}\n    members:\n      alice: [buyer]\n"
                    "      user:bob: [auditor]\n")
    with pytest.raises(AccessPolicyError) as err:
        load_access_policy(path)
    found = {(d.code, d.location.line) for d in err.value.diagnostics}
    assert ("S204", 3) in found and ("S204", 5) in found  # a bad permission, a bad principal
    path.write_text("tenants:\n  acme:\n    roles: {buyer: [crm:read]}\n    members:\n      user:bob: [auditor]\n")
    with pytest.raises(AccessPolicyError) as err:
        load_access_policy(path)
    (d,) = err.value.diagnostics
    assert (d.code, d.location.line) == ("P801", 5) and "auditor" in d.message


def test_the_file_is_parsed_again_only_when_its_bytes_change(tmp_path):
    policy = PolicyFile(tmp_path / "access.yaml")
    old = time.time() - 60
    os.utime(policy.path, (old, old))
    access = FileAccess(policy.path)
    for _ in range(5):
        assert access.permissions("acme", "user:alice") == {"billing:charge", "crm:read"}
    assert access.loads == 1
    policy.revoke("user:alice", "buyer")
    assert access.permissions("acme", "user:alice") == frozenset() and access.loads == 2


def test_permissions_wildcards_and_principals():
    assert holds({"billing:*"}, "billing:charge") and not holds({"billing:*"}, "crm:read")
    assert holds({"billing:*"}, "billing:*") and not holds({"billing:ch*"}, "billing:*")
    assert missing({"crm:read"}, ["crm:read", "email:send", "email:send"]) == ("email:send",)
    assert check_principal("service:nightly-batch") == "service:nightly-batch"
    for bad in ("alice", "role:x", "user:", "group:x"):
        with pytest.raises(ValueError):
            check_principal(bad)
    assert OpenAccess().permissions("any", "user:x") == {"*"}
    static = PolicyAccess({"tenants": {"t": {"roles": {"r": ["a:b"]}, "members": {"user:u": ["r"]}}}})
    assert static.roles("t", "user:u") == {"role:r"} and static.permissions("other", "user:u") == frozenset()


def test_run_in_the_callers_thread_refuses_an_outsider_before_anything_is_created_or_claimed(rt, charges):
    # Given a principal of another tenant (eve buys in globex), on the embedded default where `run` claims the
    # first step in its submit and runs it in the caller's thread
    # When she runs acme's charging workflow
    with pytest.raises(Unauthorized, match="not a member of tenant 'acme'"):
        rt.run(charge_plan(), {"amount": 5}, initiator="user:eve", tenant="acme")
    # Then nothing was created, claimed or charged
    assert rt.store.list_runs() == [] and charges == []


def test_run_in_the_callers_thread_reauthorises_the_step_it_claimed_in_the_submit(rt, charges, policy, monkeypatch):
    # Given alice, who may charge, and her permission revoked between her run's submit (which claims its first
    # step) and that step's execution in her thread
    from sealflow.runtime import inline

    carry = inline.actors.carry

    def revoke_then_carry(*a, **kw):
        policy.revoke("user:alice", "buyer")
        return carry(*a, **kw)

    monkeypatch.setattr(inline.actors, "carry", revoke_then_carry)
    # When she runs the workflow
    status = rt.run(charge_plan(), {"amount": 5}, initiator="user:alice", tenant="acme")
    # Then the claimed step is refused before it charges, as a worker thread would refuse it
    assert status.state == "failed" and status.run.error_class == "unauthorized" and charges == []
    # (claimed in the submit: no separate scheduling of the step before its claim)
    assert "step.scheduled" not in [e.event for e in rt.store.audit(status.run.id)]
