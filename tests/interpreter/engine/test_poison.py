"""Poison steps are bounded: an attempt whose lease expired counts as a failed attempt (``worker_lost``)."""

from __future__ import annotations

from interp_helpers import S, make_plan, retry

from sealflow.dsl.plan import ErrorRoutePlan, RetryPolicy
from sealflow.interpreter.core.retry import should_retry
from sealflow.interpreter.execution.actions import action
from sealflow.interpreter.service.runtime import Runtime


def lose(rt: Runtime, clock, message) -> tuple:
    """A worker claims ``message`` and dies holding it; the sweeper expires the lease; the next worker
    handles what the sweep requeued. Returns the messages that worker's commit made due."""
    rt.store.claim(*message, owner="doomed", now=clock.now())
    clock.advance(60)
    assert rt.sweeper.sweep().leases_expired == 1
    (requeued,) = rt.store.take_outbox(clock.now())
    return rt.engine.handle(*requeued)


def test_worker_lost_is_retried_listed_or_not_and_never_past_max_attempts():
    # Given a retry class that lists only timeouts, with three attempts
    policy = RetryPolicy(on=("timeout",), max_attempts=3)
    # Then a lost worker is retried while attempts remain, and not after the last one
    assert should_retry(policy, "worker_lost", 1) and should_retry(policy, "worker_lost", 2)
    assert not should_retry(policy, "worker_lost", 3)
    assert not should_retry(RetryPolicy(), "worker_lost", 1)  # the default: one attempt


def test_a_step_that_keeps_killing_its_worker_is_dead_lettered_after_max_attempts(store, registry, clock):
    # Given a step with three attempts whose every worker dies holding it
    calls = []

    @action("t.work", registry=registry)
    def work(ctx):
        calls.append(ctx.attempt)
        return "done"

    rt = Runtime(store, registry, {}, clock=clock, worker_timeout_ms=20)
    try:
        plan = make_plan(S("one", "action", action="t.work", timeout_ms=1000,
                           retry=retry(max_attempts=3, initial_ms=0)))
        run_id = rt.submit(plan, {}, initiator="u")
        (message,) = rt.store.take_outbox(clock.now())
        # When each lost lease is swept and the requeued attempt handled by a live worker
        for _ in range(3):
            due = lose(rt, clock, message)
            if due:
                (message,) = due
        # Then each loss counted as a failed try, no try ran a fourth time, the run is dead-lettered
        assert calls == [] and due == ()
        attempts = rt.store.attempts(run_id)
        assert [(a.try_no, a.state, a.error_class, a.leases_lost) for a in attempts] == \
            [(n, "failed", "worker_lost", 1) for n in (1, 2, 3)]
        run = rt.store.get_run(run_id)
        assert run.state == "failed" and run.error_class == "worker_lost"
        (letter,) = rt.store.dead_letters()
        assert letter.run_id == run_id and letter.error_class == "worker_lost"
        events = [e.event for e in rt.audit(run_id)]
        assert events.count("lease_expired") == 3 and events.count("retry_scheduled") == 2
    finally:
        rt.close()


def test_a_lost_worker_takes_an_on_error_route_once_attempts_are_spent(runtime, registry, clock):
    # Given a step of one attempt routing worker_lost to a fallback step
    @action("t.work", registry=registry)
    def work(ctx):
        return "primary"

    @action("t.fallback", registry=registry)
    def fallback(ctx):
        return "fallback"

    plan = make_plan(S("one", "action", action="t.work", timeout_ms=1000, next="end",
                       on_error=(ErrorRoutePlan(errors=("worker_lost",), next="two"),)),
                     S("two", "action", action="t.fallback"), output="${{ steps.two.output }}")
    run_id = runtime.submit(plan, {}, initiator="u")
    (message,) = runtime.store.take_outbox(clock.now())
    # When its worker dies holding it
    for due in lose(runtime, clock, message):
        runtime.send(due)
    # Then the route is taken and the run completes through the fallback
    status = runtime.drive(run_id)
    assert status.state == "completed" and status.output == "fallback"
