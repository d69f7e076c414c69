"""The store contract, written once and run against every backend (the ``store`` fixture).

Given / When / Then in each test. Everything here goes through the abstract
:class:`sealflow.store.base.Store` interface; backend-specific checks live in
``test_store_sqlite.py``. The checks a third party can run against its own backend move, one by one, into the
conformance kit (:mod:`sealflow.testing.conformance.kit`, run here by ``test_store_conformance.py``): submit and
idempotency, claim and fencing, and the definition registry so far.
"""

from __future__ import annotations

import dataclasses

import pytest

from sealflow.store import (
    AuditEvent,
    Commit,
    ConcurrencyError,
    DeadLetterSpec,
    FencingError,
    IllegalTransition,
    InvalidOperation,
    LedgerEntry,
    MessageRefused,
    NextAttempt,
    RunChange,
    StepChange,
)
from sealflow.testing.conformance.helpers import (  # noqa: F401 - the other store tests import them from here
    T0,
    new_run,
    snapshot,
    submit_and_claim,
    succeed_and_go,
)


def test_a_commit_applies_everything_together(store):
    # Given a claimed attempt
    claimed, _ = submit_and_claim(store)
    # When it commits success + ledger + next step
    done = store.commit(succeed_and_go(claimed, ledger=LedgerEntry("default", "k", "r1", "a", '"v"')), T0 + 1)
    # Then step, run, ledger, next attempt, its message and the audit all moved at once
    assert done.rev == claimed.run.rev + 1 and done.run_state == "running"
    a, b = store.attempts("r1")
    assert (a.state, a.output, a.lease_owner) == ("succeeded", {"ok": True}, None)
    assert (b.step_id, b.state) == ("b", "scheduled")
    assert done.messages == ((b.run_id, "b", 1, b.token, "default"),)  # ids only, with the run's tenant
    assert store.get_run("r1").steps_executed == 1 and store.get_run("r1").cursor_step == "b"
    assert store.ledger_get("default", "k").result == "v"
    assert store.results("r1") == {"a": ("succeeded", '{"ok":true}')}


def test_a_failed_attempts_traceback_is_kept_with_it_and_read_back_with_the_runs_attempts(store):
    # Given a claimed attempt
    claimed, _ = submit_and_claim(store)
    att = claimed.attempt
    trace = "Traceback (most recent call last):\n  actions/hello.py:12 in greet\n    d['missing']\nKeyError: 'missing'"
    # When it fails with the traceback of its action's exception, and the run goes on to a next step
    store.commit(Commit(run_id="r1", expected_rev=claimed.run.rev,
                        step=StepChange(att.step_id, att.attempt, att.token, "failed", error_class="internal",
                                        error_message="KeyError: 'missing' (actions/hello.py:12 in greet)",
                                        error_trace=trace),
                        run=RunChange(add_steps=1), next=NextAttempt("b", 1, "scheduled", T0, 30_000),
                        dispatch_inline=True), T0 + 1)
    # Then the run's attempts give it back with the failed attempt, and none with the next one
    a, b = store.attempts("r1")
    assert (a.state, a.error_class, a.error_trace) == ("failed", "internal", trace)
    assert b.error_trace is None


def test_a_commit_that_breaks_halfway_changes_nothing(store):
    # Given a claimed attempt
    claimed, _ = submit_and_claim(store)
    before = snapshot(store, "r1")
    # When a commit's step change is legal but its run change is not (running -> queued)
    with pytest.raises(IllegalTransition):
        store.commit(succeed_and_go(claimed, state="queued", ledger=LedgerEntry("default", "k", "r1", "a", "1")), T0)
    # Then neither the step, the ledger, nor the next attempt were applied; the refusal is audited
    after = snapshot(store, "r1")
    assert after[:4] == before[:4] and store.ledger_get("default", "k") is None
    assert after[4][:len(before[4])] == before[4]
    (illegal,) = after[4][len(before[4]):]
    assert (illegal.event, illegal.state_before, illegal.state_after) == ("illegal_transition", "running", "queued")


def test_an_illegal_step_transition_is_refused_and_audited(store):
    # Given a step that succeeded
    claimed, _ = submit_and_claim(store)
    store.commit(succeed_and_go(claimed, next_step=None, state="completed"), T0)
    att = store.attempts("r1")[0]
    before = snapshot(store, "r1")
    # When something tries to move it back to running
    bad = Commit(run_id="r1", expected_rev=store.get_run("r1").rev, step=StepChange("a", 1, att.token, "running"))
    with pytest.raises(IllegalTransition, match="cannot go from 'succeeded' to 'running'"):
        store.commit(bad, T0)
    # Then it stays succeeded and the audit records the attempt
    assert store.attempts("r1") == before[1]
    assert store.audit("r1")[-1].event == "illegal_transition"


# -- ledger ------------------------------------------------------------------------------------------

def test_the_ledger_keeps_the_first_result_for_a_key(store):
    c1, _ = submit_and_claim(store, "r1")
    c2, _ = submit_and_claim(store, "r2")
    store.commit(succeed_and_go(c1, ledger=LedgerEntry("default", "email:1", "r1", "a", '"first"')), T0)
    store.commit(succeed_and_go(c2, ledger=LedgerEntry("default", "email:1", "r2", "a", '"second"')), T0)
    rec = store.ledger_get("default", "email:1")
    assert (rec.result, rec.run_id) == ("first", "r1")
    assert store.ledger_get("other-tenant", "email:1") is None


# -- outbox and timers -------------------------------------------------------------------------------

def test_take_outbox_marks_rows_sent_and_unclaimed_ones_are_redelivered(store):
    store.submit(new_run(), T0)
    (msg,) = store.take_outbox(T0)
    assert store.take_outbox(T0) == []
    # a message lost before anyone claimed it is sent again after redeliver_after
    assert store.sweep(T0 + 10, redeliver_after=60).redelivered == 0
    assert store.sweep(T0 + 61, redeliver_after=60).redelivered == 1
    assert store.take_outbox(T0 + 61) == [msg]


def test_due_messages_come_with_their_runs_priority_highest_first(store):
    # Given a normal and a critical run, both due
    import dataclasses

    store.submit(new_run("r1"), T0)
    store.submit(dataclasses.replace(new_run("r2"), priority="critical"), T0)
    # When the dispatcher takes what is due
    due = store.take_due(T0)
    # Then each message carries its run's priority (its queue: no read of the run to route it), critical first
    assert [(d.message.run_id, d.priority) for d in due] == [("r2", "critical"), ("r1", "normal")]
    assert store.take_due(T0) == []


def test_reset_dispatch_resends_everything_the_lost_broker_held(store):
    store.submit(new_run("r1"), T0)
    store.submit(new_run("r2"), T0)
    assert len(store.take_outbox(T0)) == 2
    assert store.reset_dispatch() == 2
    assert {m.run_id for m in store.take_outbox(T0)} == {"r1", "r2"}


def test_a_backoff_timer_schedules_the_retry_when_due(store):
    # Given a failed attempt with a retry in 2s
    claimed, _ = submit_and_claim(store)
    att = claimed.attempt
    store.commit(Commit(run_id="r1", expected_rev=claimed.run.rev,
                        step=StepChange("a", 1, att.token, "failed", error_class="network",
                                                          error_message="boom"),
                        next=NextAttempt("a", 2, "retry_wait", T0 + 2, 30_000, "backoff")), T0)
    (timer,) = store.timers("r1")
    assert (timer.kind, timer.fire_at, timer.step_id, timer.attempt) == ("backoff", T0 + 2, "a", 2)
    # When the sweeper runs before and after it is due
    assert not store.sweep(T0 + 1) and store.outbox("r1") == []
    report = store.sweep(T0 + 2)
    # Then the retry is scheduled under a new token with its message due
    assert report.timers_fired == 1 and store.timers("r1") == []
    retry = store.attempts("r1")[-1]
    assert (retry.attempt, retry.try_no, retry.state) == (2, 2, "scheduled")
    (row,) = store.outbox("r1")
    assert row.token == retry.token


def test_a_waiting_attempt_is_claimable_only_when_its_timer_is_due(store):
    # Given an attempt waiting on a timer 60s out
    claimed, _ = submit_and_claim(store)
    att = claimed.attempt
    store.commit(Commit(run_id="r1", expected_rev=claimed.run.rev,
                        step=StepChange("a", 1, att.token, "waiting", due_at=T0 + 60, data={"fire_at": T0 + 60},
                                        timer_kind="wait"),
                        run=RunChange(state="waiting")), T0)
    assert store.next_due("r1") == T0 + 60
    with pytest.raises(MessageRefused, match="attempt is waiting"):
        store.claim("r1", "a", 1, att.token, owner="w", now=T0 + 1)
    # When the timer fires
    store.sweep(T0 + 60)
    (msg,) = store.take_outbox(T0 + 60)
    again = store.claim(*msg, owner="w", now=T0 + 60)
    # Then the attempt resumes, the run runs again
    assert again.resumed and again.attempt.data == {"fire_at": T0 + 60} and again.run.state == "running"


# -- cancel, deadline, dead letters ------------------------------------------------------------------

def test_cancel_before_any_claim_cancels_at_once(store):
    store.submit(new_run(), T0)
    run = store.cancel("r1", T0, actor="user:ana", reason="not needed")
    assert run.state == "cancelled" and store.outbox("r1") == []
    assert store.attempts("r1")[0].state == "cancelled"


def test_cancel_while_running_waits_for_the_attempt(store):
    # Given a running attempt
    claimed, _ = submit_and_claim(store)
    # When the run is cancelled
    assert store.cancel("r1", T0, actor="user:ana").state == "cancelling"
    # Then the worker's commit conflicts (the run changed) and must re-read and decide again
    with pytest.raises(ConcurrencyError):
        store.commit(succeed_and_go(claimed), T0)
    run = store.get_run("r1")
    att = claimed.attempt
    store.commit(Commit(run_id="r1", expected_rev=run.rev,
                        step=StepChange("a", 1, att.token, "succeeded", output_json="1"),
                        run=RunChange(state="cancelled")), T0)
    assert store.get_run("r1").state == "cancelled"


def test_cancelling_a_completed_run_is_an_illegal_transition(store):
    claimed, _ = submit_and_claim(store)
    store.commit(succeed_and_go(claimed, next_step=None, state="completed"), T0)
    with pytest.raises(IllegalTransition):
        store.cancel("r1", T0, actor="user:ana")
    assert store.get_run("r1").state == "completed"


def test_the_run_deadline_times_the_run_out_and_fences_the_running_attempt(store):
    store.submit(new_run(deadline=T0 + 20), T0)
    (msg,) = store.take_outbox(T0)
    claimed = store.claim(*msg, owner="w", now=T0)
    assert store.sweep(T0 + 20).runs_timed_out == 1
    run = store.get_run("r1")
    assert (run.state, run.error_class) == ("timed_out", "timeout")
    assert store.attempts("r1")[0].state == "timed_out"
    assert store.dead_letter("r1").status == "dead"
    with pytest.raises(FencingError):
        store.commit(succeed_and_go(claimed), T0 + 21)


def fail_run(store, claimed, message="boom", now=T0):
    att = claimed.attempt
    spec = DeadLetterSpec("a", f"step 'a' failed: {message}", "internal", f"fp:{message}")
    return store.commit(Commit(run_id=att.run_id, expected_rev=claimed.run.rev,
                               step=StepChange("a", att.attempt, att.token, "failed", error_class="internal",
                                               error_message=message),
                               run=RunChange(state="failed", error_class="internal", error_message=message),
                               dead_letter=spec), now)


def redrive_and_claim(store, now):
    store.redrive("r1", NextAttempt("a", 1, "scheduled", now, 30_000), now, actor="ops", deadline=None)
    (msg,) = store.take_outbox(now)
    return store.claim(*msg, owner="w", now=now)


def test_dead_letters_redrive_and_quarantine_on_the_same_fingerprint(store):
    # Given a run that failed into the dead-letter list
    claimed, _ = submit_and_claim(store)
    assert fail_run(store, claimed).run_state == "failed"
    (letter,) = store.dead_letters()
    assert (letter.run_id, letter.fingerprint, letter.status, letter.redrive_count) == ("r1", "fp:boom", "dead", 0)
    # When it is redriven and fails the same way again
    again = redrive_and_claim(store, T0 + 1)
    assert store.dead_letters() == [] and store.dead_letter("r1").status == "redriven"
    assert fail_run(store, again, now=T0 + 2).run_state == "quarantined"
    # Then it is quarantined and cannot be redriven
    letter = store.dead_letter("r1")
    assert (letter.status, letter.quarantined, letter.redrive_count) == ("quarantined", True, 1)
    assert store.get_run("r1").state == "quarantined"
    with pytest.raises(InvalidOperation, match="quarantined"):
        store.redrive("r1", NextAttempt("a", 1, "scheduled", T0, 30_000), T0, actor="ops", deadline=None)


def test_a_different_failure_after_redrive_goes_back_to_the_dead_letters(store):
    claimed, _ = submit_and_claim(store)
    fail_run(store, claimed, "first cause")
    again = redrive_and_claim(store, T0 + 1)
    assert fail_run(store, again, "second cause", now=T0 + 2).run_state == "failed"
    letter = store.dead_letter("r1")
    assert (letter.status, letter.fingerprint, letter.redrive_count) == ("dead", "fp:second cause", 1)


def test_only_a_dead_letter_can_be_redriven(store):
    store.submit(new_run(), T0)
    with pytest.raises(InvalidOperation, match="not in the dead-letter list"):
        store.redrive("r1", NextAttempt("a", 1, "scheduled", T0, 30_000), T0, actor="ops", deadline=None)


# -- audit -------------------------------------------------------------------------------------------

def test_the_audit_log_only_grows(store):
    # Given some history
    claimed, _ = submit_and_claim(store)
    first = store.audit("r1")
    # When more happens (a commit, a refusal, a standalone event)
    store.commit(succeed_and_go(claimed), T0)
    with pytest.raises(MessageRefused):
        store.claim("r1", "a", 1, 1, owner="x", now=T0)
    store.append_audit(AuditEvent("note", None, "ops", run_id="r1", detail={"why": "test"}), T0)
    # Then the earlier events are unchanged, in order, and new ones follow with growing ids
    later = store.audit("r1")
    assert later[:len(first)] == first
    ids = [e.id for e in later]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert later[-1].detail == {"why": "test"}
    assert all(dataclasses.is_dataclass(e) for e in later)


def test_stalled_runs_active_runs_and_lease_owners(store):
    claimed, _ = submit_and_claim(store)
    assert store.stalled_runs() == [] and store.lease_owners() == ["w1"] and store.active_runs() == ["r1"]
    # a worker known dead: its leases end at once, each attempt back to scheduled with what was observed
    assert store.expire_leases("w1", T0 + 1, "its process no longer exists") == 1
    assert store.lease_owners() == [] and store.sweep(T0 + 1).leases_expired == 0
    again = store.active_attempt("r1")
    assert (again.state, again.leases_lost, again.lease_owner) == ("scheduled", 1, None)
    assert again.error_message == "worker w1: its process no longer exists"
    assert [m[:3] for m in store.take_outbox(T0 + 1)] == [("r1", again.step_id, again.attempt)]


# -- the audit chain, the definition registry, admission and the bulkhead ----------------------------------

def test_each_tenants_audit_chain_verifies(store):
    from sealflow.store import auditchain

    # Given runs of two tenants that moved on, and an event that names no run
    for run_id, tenant in (("r1", "acme"), ("r2", "umbrella"), ("r3", "acme")):
        store.submit(new_run(run_id, tenant=tenant), T0)
    for msg in store.take_outbox(T0):
        store.commit(succeed_and_go(store.claim(*msg, owner="w1", now=T0), next_step=None, state="completed"), T0)
    store.append_audit(AuditEvent("note", None, "ops", detail={"tenant": "acme"}), T0)
    # Then every tenant's chain counts 1, 2, 3... from its own start and verifies against its head
    report = auditchain.verify(store)
    assert report.ok, report.breaks
    heads = store.audit_heads()
    assert set(heads) == {"acme", "umbrella"}
    for tenant in ("acme", "umbrella"):
        chain = store.audit_chain(tenant)
        assert [row[2] for row in chain] == list(range(1, len(chain) + 1))
        assert heads[tenant] == (len(chain), chain[-1][4])


def test_admission_refuses_over_the_queue_limit_and_the_daily_quota_writing_nothing(store):
    from sealflow.policy.budgets import day_of
    from sealflow.runtime.config import TenantLimits
    from sealflow.store import AdmissionRefused

    # Given a tenant allowed one unfinished run, with one queued
    store.submit(new_run("r1"), T0, TenantLimits(max_queued_runs=1))
    # When a second is submitted / Then it is refused as rate-limited and nothing is written
    with pytest.raises(AdmissionRefused) as got:
        store.submit(new_run("r2"), T0, TenantLimits(max_queued_runs=1))
    assert (got.value.limit, got.value.error_class) == ("max_queued_runs", "rate_limited")
    assert [r.id for r in store.list_runs()] == ["r1"] and store.audit("r2") == []
    # Given the first run spent 100 tokens and $0.25 today (charged in its commit)
    (msg,) = store.take_outbox(T0)
    claimed = store.claim(*msg, owner="w1", now=T0)
    att = claimed.attempt
    store.commit(Commit(run_id="r1", expected_rev=claimed.run.rev,
                        step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json="1"),
                        run=RunChange(state="completed", add_steps=1, add_tokens=100, add_cost_usd=0.25)), T0)
    assert store.tenant_usage("default", day_of(T0)) == (100, 0.25)
    # When a run is submitted over the daily token quota / Then it is refused until midnight UTC
    with pytest.raises(AdmissionRefused) as got:
        store.submit(new_run("r3"), T0 + 1, TenantLimits(daily_tokens=100))
    assert (got.value.limit, got.value.error_class) == ("daily_tokens", "budget_exceeded")
    assert 0 < got.value.retry_after <= 86_400


def test_the_bulkhead_puts_a_claim_off_while_the_tenant_has_its_steps_running(store):
    from sealflow.store import ClaimDeferred

    # Given a tenant allowed one running step, with one running
    store.submit(new_run("r1"), T0)
    store.submit(new_run("r2"), T0)
    first, second = store.take_outbox(T0)
    store.claim(*first, owner="w1", now=T0, running_limit=lambda tenant: 1)
    # When the second message is claimed / Then it is put off: its message is due again shortly
    with pytest.raises(ClaimDeferred) as got:
        store.claim(*second, owner="w1", now=T0, running_limit=lambda tenant: 1)
    assert got.value.retry_in > 0
    (row,) = store.outbox(second.run_id)
    assert row.sent_at is None and row.due_at == pytest.approx(T0 + got.value.retry_in)
    assert store.attempts(second.run_id)[0].state == "scheduled"


def test_results_of_named_steps_only(store):
    # Given a run with two results
    claimed, _ = submit_and_claim(store)
    done = store.commit(dataclasses.replace(succeed_and_go(claimed), claim_as="w1"), T0 + 1)
    store.commit(succeed_and_go(done.claimed, next_step=None, state="completed"), T0 + 2)
    # When the results of some steps are asked for
    # Then only those come back (none for none), and all without a list
    assert set(store.results("r1")) == {"a", "b"}
    assert set(store.results("r1", ["b", "nope"])) == {"b"}
    assert store.results("r1", []) == {}
