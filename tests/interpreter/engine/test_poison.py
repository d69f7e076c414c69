"""Lost attempts: the system's failure, not the step's. A lost attempt runs again without consuming
``max_attempts``, up to ``lost_attempts`` losses in a row; past it the step is poison (quarantined); an action
that cannot deduplicate waits for a person's call instead of running again (engine/poison.py)."""

from __future__ import annotations

from typing import TypedDict

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.retry import should_retry
from sealflow.dsl.plan import ErrorRoutePlan, RetryPolicy
from sealflow.execution.actions import action
from sealflow.runtime.config import RuntimeConfig
from sealflow.runtime.facade import Runtime
from sealflow.store.errors import InvalidOperation


def lose(rt: Runtime, clock, message, owner: str = "doomed") -> tuple:
    """A worker claims ``message`` and dies holding it; the sweeper expires the lease; the next worker
    handles what the sweep requeued. Returns the messages that worker's commit made due."""
    rt.store.claim(*message, owner=owner, now=clock.now())
    clock.advance(60)
    assert rt.sweeper.sweep().leases_expired == 1
    (requeued,) = rt.store.take_outbox(clock.now())
    return rt.engine.handle(*requeued).messages


def runtime_with(store, registry, clock, **config) -> Runtime:
    return Runtime(store, registry, {}, clock=clock, worker_timeout_ms=20, config=RuntimeConfig.from_dict(config))


def test_worker_lost_is_retried_only_where_a_retry_class_lists_it():
    # Given a retry class that lists only timeouts
    policy = RetryPolicy(on=("timeout",), max_attempts=3)
    # Then worker_lost (what a person's "failed" or a poison step records) is not retried unlisted
    assert not should_retry(policy, "worker_lost", 1)
    assert should_retry(RetryPolicy(on=("worker_lost",), max_attempts=2), "worker_lost", 1)


def test_a_lost_attempt_runs_again_without_a_retry_class_and_the_run_completes(store, registry, clock):
    # Given a one-step workflow with no retry class (max_attempts 1)
    calls = []

    @action("t.work", registry=registry)
    def work(ctx):
        calls.append((ctx.attempt, ctx.fence))
        return "done"

    rt = runtime_with(store, registry, clock)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.work"), output="${{ steps.one.output }}"), {},
                           initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When its worker dies holding the attempt and the sweeper hands it on
        lose(rt, clock, message)
        # Then the next worker ran it (once), the try was not consumed, and the run completed
        run = rt.store.get_run(run_id)
        assert run.state == "completed" and run.output == "done"
        assert len(calls) == 1 and calls[0][0] == 1
        (attempt,) = rt.store.attempts(run_id)
        assert (attempt.try_no, attempt.state, attempt.leases_lost, attempt.error_message) == (1, "succeeded", 1, None)
        assert rt.store.dead_letters() == []
        expired = [e for e in rt.audit(run_id) if e.event == "lease_expired"]
        assert len(expired) == 1 and "ran out before it committed" in expired[0].detail["observed"]
        assert "died" not in expired[0].detail["observed"].split("(")[0]  # observed, not guessed
    finally:
        rt.close()


def test_a_lost_attempt_does_not_consume_max_attempts(store, registry, clock):
    # Given a step of two attempts that times out once, and whose first attempt's worker dies first
    calls = []

    @action("t.flaky", registry=registry)
    def flaky(ctx):
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise TimeoutError("slow")
        return "ok"

    rt = runtime_with(store, registry, clock)
    try:
        plan = make_plan(S("one", "action", action="t.flaky", retry=retry("timeout", max_attempts=2, initial_ms=0)))
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When the first attempt is lost, then runs and times out, then the retry runs
        due = lose(rt, clock, message)
        for m in due:
            rt.engine.handle(*m)
        # Then both of the step's tries ran: the loss did not use one up
        assert calls == [1, 2] and rt.store.get_run(run_id).state == "completed"
        assert [(a.try_no, a.state, a.leases_lost) for a in rt.store.attempts(run_id)] == \
            [(1, "failed", 1), (2, "succeeded", 0)]
    finally:
        rt.close()


def test_a_step_lost_lost_attempts_times_in_a_row_is_poison_and_the_run_is_quarantined(store, registry, clock):
    # Given a step whose every worker dies holding it, with an on_error route for worker_lost
    calls = []

    @action("t.pill", registry=registry)
    def pill(ctx):
        calls.append(ctx.attempt)
        return "never committed"

    @action("t.fallback", registry=registry)
    def fallback(ctx):
        calls.append("fallback")
        return "fallback"

    rt = runtime_with(store, registry, clock)
    try:
        plan = make_plan(S("one", "action", action="t.pill", next="end",
                           on_error=(ErrorRoutePlan(errors=("worker_lost",), next="two"),)),
                         S("two", "action", action="t.fallback"))
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When the attempt is lost three times (the default lost_attempts): the first two reruns are claimed by
        # workers that die too, the third claim finds it poison
        for n in range(3):
            rt.store.claim(*message, owner=f"doomed{n}", now=clock.now())
            clock.advance(60)
            assert rt.sweeper.sweep().leases_expired == 1
            (message,) = rt.store.take_outbox(clock.now())
        due = rt.engine.handle(*message).messages
        # Then it did not run a fourth time, no route was taken, and the run is quarantined as poison
        assert due == () and calls == []
        run = rt.store.get_run(run_id)
        assert run.state == "quarantined" and run.error_class == "worker_lost"
        assert run.error_message.startswith("poison: step 'one' was lost 3 times in a row")
        assert "ran out before it committed" in run.error_message
        (letter,) = rt.store.dead_letters()
        assert letter.run_id == run_id and letter.status == "quarantined" and letter.reason.startswith("poison:")
        (attempt,) = rt.store.attempts(run_id)
        assert (attempt.try_no, attempt.state, attempt.leases_lost) == (1, "failed", 3)
        with pytest.raises(InvalidOperation, match="quarantined"):
            rt.dlq_redrive(run_id)
    finally:
        rt.close()


@pytest.mark.parametrize("bound", [1, 5])
def test_lost_attempts_is_the_runtime_configurations_bound(store, registry, clock, bound):
    # Given a runtime configured with lost_attempts
    @action("t.work", registry=registry)
    def work(ctx):
        return "done"

    rt = runtime_with(store, registry, clock, lost_attempts=bound)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.work")), {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When the attempt is lost `bound` times in a row
        for n in range(bound):
            rt.store.claim(*message, owner=f"doomed{n}", now=clock.now())
            clock.advance(60)
            rt.sweeper.sweep()
            (message,) = rt.store.take_outbox(clock.now())
        rt.engine.handle(*message)
        # Then it is poison at exactly that bound
        assert rt.store.get_run(run_id).state == "quarantined"
    finally:
        rt.close()


def test_a_worker_known_dead_is_named_as_such(store, registry, clock):
    # Given an attempt held by a worker whose death recovery can tell (its process is gone from this host)
    @action("t.work", registry=registry)
    def work(ctx):
        return "done"

    rt = runtime_with(store, registry, clock, lost_attempts=1)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.work")), {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        rt.store.claim(*message, owner="gone:1:x", now=clock.now())
        # When recovery ends its lease with what it observed, and the step becomes poison at once
        assert rt.store.expire_leases("gone:1:x", clock.now(), "its process no longer exists") == 1
        (requeued,) = rt.store.take_outbox(clock.now())
        rt.engine.handle(*requeued)
        # Then the message says what was observed, naming the worker
        run = rt.store.get_run(run_id)
        assert run.state == "quarantined" and "worker gone:1:x: its process no longer exists" in run.error_message
    finally:
        rt.close()


def test_an_unknown_outcome_waits_for_a_person_and_retry_runs_it_again(store, registry, clock):
    # Given an irreversible action whose target cannot deduplicate
    sent = []

    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        sent.append(ctx.attempt)
        return {"sent": True}

    rt = runtime_with(store, registry, clock)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.sms"), output="${{ steps.one.output }}"), {},
                           initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When its attempt is lost
        assert lose(rt, clock, message) == ()
        # Then it was not run again: the run waits at an outcome-unknown gate
        status = rt.status(run_id)
        assert sent == [] and status.run.state == "waiting"
        assert status.waiting["kind"] == "outcome_unknown" and status.waiting["lost"] == 1
        # And an approval cannot decide it
        with pytest.raises(InvalidOperation, match="sealflow resolve"):
            rt.approve(run_id, actor="user:boss")
        # When a person decides to run it again
        rt.resolve(run_id, "retry", actor="user:ops", reason="the gateway shows no message sent")
        rt.drive(run_id)
        # Then it ran once and the run completed; the decision is audited
        assert sent == [1] and rt.store.get_run(run_id).state == "completed"
        decided = [e for e in rt.audit(run_id) if e.event == "outcome_decided"]
        assert decided[0].detail["decision"] == "retry" and decided[0].actor == "user:ops"
    finally:
        rt.close()


def test_an_unknown_outcome_marked_succeeded_takes_the_given_output_checked_by_the_steps_rules(store, registry, clock):
    # Given a non-deduplicating action with a validate rule, lost once
    from sealflow.dsl.plan import ValidateRulePlan

    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        raise AssertionError("must not run again")

    rt = runtime_with(store, registry, clock)
    try:
        plan = make_plan(S("one", "action", action="t.sms", idempotency_key="${{ run.id }}:one",
                           validations=(ValidateRulePlan(check="output.sent == true"),)),
                         output="${{ steps.one.output }}")
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        lose(rt, clock, message)
        # When a person marks it succeeded with an output the step's rules refuse, nothing changes
        with pytest.raises(InvalidOperation, match="fails step 'one'"):
            rt.resolve(run_id, "succeeded", actor="user:ops", reason="checked", output={"sent": False})
        assert rt.store.get_run(run_id).state == "waiting"
        # When with an output they accept
        rt.resolve(run_id, "succeeded", actor="user:ops", reason="the gateway log shows it sent",
                   output={"sent": True})
        rt.drive(run_id)
        # Then the run completes with it, and it is recorded under the step's key (a redrive would replay it)
        run = rt.store.get_run(run_id)
        assert run.state == "completed" and run.output == {"sent": True}
        assert rt.store.ledger_get(run.tenant, f"{run_id}:one") is not None
    finally:
        rt.close()


def test_an_unknown_outcome_judged_failed_takes_its_on_error_route_and_is_not_retried(store, registry, clock):
    # Given a non-deduplicating action with retries for worker_lost and an on_error route
    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        raise AssertionError("must not run again")

    @action("t.apologise", registry=registry)
    def apologise(ctx):
        return "sorry"

    rt = runtime_with(store, registry, clock)
    try:
        plan = make_plan(S("one", "action", action="t.sms", next="end", retry=retry("worker_lost", max_attempts=3),
                           on_error=(ErrorRoutePlan(errors=("worker_lost",), next="two"),)),
                         S("two", "action", action="t.apologise"), output="${{ steps.two.output }}")
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        lose(rt, clock, message)
        # When a person judges it failed (a reason is required)
        with pytest.raises(InvalidOperation, match="needs a reason"):
            rt.resolve(run_id, "failed", actor="user:ops", reason=" ")
        rt.resolve(run_id, "failed", actor="user:ops", reason="the gateway rejected it")
        rt.drive(run_id)
        # Then no retry ran; the route did
        run = rt.store.get_run(run_id)
        assert run.state == "completed" and run.output == "sorry"
        assert [a.try_no for a in rt.store.attempts(run_id) if a.step_id == "one"] == [1]
    finally:
        rt.close()


def test_an_unknown_outcome_nobody_decides_fails_closed_at_its_timeout(store, registry, clock):
    # Given a non-deduplicating action lost once, under a one-hour decision window
    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        raise AssertionError("must not run again")

    rt = runtime_with(store, registry, clock, outcome_unknown_timeout="1h")
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.sms")), {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        lose(rt, clock, message)
        # When an hour passes with no decision
        clock.advance(3601)
        rt.sweeper.sweep()
        for m in rt.store.take_outbox(clock.now()):
            rt.engine.handle(*m)
        # Then the step failed (not run again) and the run is dead-lettered
        run = rt.store.get_run(run_id)
        assert run.state == "failed" and run.error_class == "worker_lost"
        assert "nobody decided" in run.error_message
    finally:
        rt.close()


def test_only_a_principal_holding_runs_resolve_may_decide(store, registry, clock):
    # Given a run of tenant acme waiting at an outcome-unknown gate, under an access policy
    from sealflow.policy.access import PolicyAccess

    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        return {"sent": True}

    access = PolicyAccess({"tenants": {"acme": {
        "roles": {"ops": ["runs:resolve", "runs:read"], "viewer": ["runs:read"]},
        "members": {"user:ops": ["ops"], "user:viewer": ["viewer"], "user:u": ["viewer"]}}}})
    rt = Runtime(store, registry, {}, clock=clock, worker_timeout_ms=20, access=access)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.sms")), {}, initiator="user:u", tenant="acme")
        (message,) = rt.store.take_outbox(clock.now())
        lose(rt, clock, message)
        # When a member without runs:resolve decides, and an outsider
        from sealflow.store.errors import NotFound

        for who in ("user:viewer", "user:stranger"):
            with pytest.raises(NotFound):
                rt.resolve(run_id, "retry", actor=who, reason="x")
        # Then nothing changed; the holder of runs:resolve may
        assert rt.store.get_run(run_id).state == "waiting"
        rt.resolve(run_id, "retry", actor="user:ops", reason="checked the gateway")
        assert rt.store.get_run(run_id).state in ("running", "completed")
    finally:
        rt.close()


def test_honours_idempotency_key_false_is_refused_on_a_read_action(registry):
    from sealflow.core.errors import ActionRegistrationError

    with pytest.raises(ActionRegistrationError, match="effect is 'read'"):
        action("t.read", honours_idempotency_key=False, registry=registry)(lambda ctx: None)


def _lost_sms(store, registry, clock, plan_fields=None, **config):
    """A runtime, and a run of one non-deduplicating SMS step whose attempt was lost: it waits at the gate."""
    sent = []

    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx):
        sent.append(ctx.fence)
        return {"sent": True}

    rt = runtime_with(store, registry, clock, **config)
    run_id = rt.submit(make_plan(S("one", "action", action="t.sms"), **(plan_fields or {})), {}, initiator="u")
    (message,) = rt.store.take_outbox(clock.now())
    lose(rt, clock, message)
    assert rt.store.get_run(run_id).state == "waiting"
    return rt, run_id, sent


def test_a_run_cancelled_at_an_outcome_unknown_gate_is_cancelled_and_cannot_be_resolved(store, registry, clock):
    # Given a run waiting for a person to decide its lost SMS
    rt, run_id, sent = _lost_sms(store, registry, clock)
    try:
        # When its initiator cancels it
        rt.cancel(run_id, actor="u", reason="no longer needed")
        # Then it is cancelled, nothing was sent again, and a late decision is refused, nothing changed
        assert rt.store.get_run(run_id).state == "cancelled" and sent == []
        with pytest.raises(InvalidOperation, match="no decision on a lost attempt waiting"):
            rt.resolve(run_id, "retry", actor="user:ops", reason="too late")
        assert rt.store.get_run(run_id).state == "cancelled" and sent == []
    finally:
        rt.close()


def test_the_run_deadline_passing_at_an_outcome_unknown_gate_times_the_run_out(store, registry, clock):
    # Given a run of at most an hour waiting at the gate (whose own window is 72 h)
    from sealflow.dsl.plan import BudgetPlan

    rt, run_id, sent = _lost_sms(store, registry, clock, {"budget": BudgetPlan(max_runtime_ms=3_600_000)})
    try:
        # When the hour passes with no decision
        clock.advance(3600)
        rt.sweeper.sweep()
        # Then the run timed out (its deadline bounds the wait for a person too), and nothing was sent again
        run = rt.store.get_run(run_id)
        assert run.state == "timed_out" and sent == []
    finally:
        rt.close()


def test_an_output_over_the_payload_limit_is_refused_and_nothing_changes(store, registry, clock):
    # Given a run waiting at the gate, under a 1 KiB payload limit
    rt, run_id, sent = _lost_sms(store, registry, clock, payloads={"max_bytes": "1KiB"})
    try:
        # When a person marks it succeeded with a 4 KiB output, or one that is not JSON
        with pytest.raises(InvalidOperation, match="cannot be the step's"):
            rt.resolve(run_id, "succeeded", actor="user:ops", reason="checked", output={"blob": "x" * 4096})
        with pytest.raises(InvalidOperation, match="cannot be the step's"):
            rt.resolve(run_id, "succeeded", actor="user:ops", reason="checked", output={"n": float("nan")})
        # Then nothing changed: it still waits, and a decision that is not one is refused too
        with pytest.raises(InvalidOperation, match="not a decision"):
            rt.resolve(run_id, "maybe", actor="user:ops", reason="checked")
        assert rt.store.get_run(run_id).state == "waiting" and sent == []
    finally:
        rt.close()


class Sent(TypedDict):
    sent: bool


def test_an_unknown_outcome_marked_succeeded_must_fit_the_actions_declared_output(store, registry, clock):
    # Given a non-deduplicating action whose return annotation declares its output, lost once
    @action("t.sms", effect="irreversible", honours_idempotency_key=False, registry=registry)
    def sms(ctx) -> Sent:
        raise AssertionError("must not run again")

    rt = runtime_with(store, registry, clock)
    try:
        run_id = rt.submit(make_plan(S("one", "action", action="t.sms")), {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        lose(rt, clock, message)
        # When a person marks it succeeded with an output that breaks the declaration, nothing changes
        with pytest.raises(InvalidOperation, match="breaks its declared output schema"):
            rt.resolve(run_id, "succeeded", actor="user:ops", reason="checked", output={"snet": True})
        assert rt.store.get_run(run_id).state == "waiting"
        # And one that fits is taken
        rt.resolve(run_id, "succeeded", actor="user:ops", reason="the log shows it", output={"sent": True})
        rt.drive(run_id)
        assert rt.store.get_run(run_id).state == "completed"
    finally:
        rt.close()


def test_a_store_outage_inside_a_step_is_not_the_steps_failure_and_the_attempt_runs_again(store, registry, clock,
                                                                                          monkeypatch):
    # Given a keyed step whose own read of the store (the idempotency ledger) meets an outage once, as when a
    # PostgreSQL restart lands inside the step (found by the chaos suite: it failed the run as `internal`)
    from sealflow.store.errors import StoreUnavailable

    calls = []

    @action("t.work", registry=registry)
    def work(ctx):
        calls.append(ctx.attempt)
        return "done"

    real = store.ledger_get
    outages = [1]

    def flaky(*args, **kwargs):
        if outages:
            outages.pop()
            raise StoreUnavailable("the server closed the connection (a restart)")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "ledger_get", flaky)
    rt = runtime_with(store, registry, clock)
    try:
        plan = make_plan(S("one", "action", action="t.work", idempotency_key="${{ run.id }}:one"),
                         output="${{ steps.one.output }}")
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When a worker handles it: the outage goes up (the worker's, not the step's), leaving the attempt claimed
        with pytest.raises(StoreUnavailable):
            rt.engine.handle(*message)
        assert rt.store.get_run(run_id).state == "running"
        # and once its lease ends the sweeper hands it on and the next worker runs it
        clock.advance(60)
        assert rt.sweeper.sweep().leases_expired == 1
        (requeued,) = rt.store.take_outbox(clock.now())
        rt.engine.handle(*requeued)
        # Then the run completed, the step never failed as internal, and the action ran once
        run = rt.store.get_run(run_id)
        assert run.state == "completed" and run.output == "done", (run.state, run.error_class, run.error_message)
        assert [a.error_class for a in rt.store.attempts(run_id)] == [None]
        assert calls == [1]
    finally:
        rt.close()
