"""Failure semantics: classification, retries, timeouts, on_error, dead letters."""

from __future__ import annotations

import threading
import time

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.execution.actions import action


class Flaky:
    """Fails with ``errors`` in turn, then returns ``result``; counts calls."""

    def __init__(self, *errors: BaseException, result=None):
        self.errors = list(errors)
        self.calls = 0
        self.result = {"ok": True} if result is None else result

    def __call__(self, ctx, **kw):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


@pytest.fixture
def flaky(registry):
    holder = {}

    def install(*errors, result=None):
        fn = Flaky(*errors, result=result)
        holder["fn"] = fn
        action("t.flaky", registry=registry)(lambda ctx, **kw: fn(ctx, **kw))
        return fn

    return install


def test_retry_then_succeed(runtime, flaky, clock):
    # Given an action that fails twice with retryable errors, under a 3-attempt policy
    fn = flaky(ConnectionError("reset"), StepError("rate_limited", "429", retry_after=5.0))
    plan = make_plan(S("call", "action", action="t.flaky", retry=retry("network", "rate_limited", initial_ms=1000)))
    start = clock.now()
    # When it runs (sleeping through timers of any length)
    status = runtime.run(plan, {}, initiator="u", until="final")
    # Then it succeeds on the third attempt, after backoff (1s) and retry_after (5s, longer than 2s)
    assert status.state == "completed" and fn.calls == 3
    assert [(a.try_no, a.state, a.error_class) for a in status.attempts] == [
        (1, "failed", "network"), (2, "failed", "rate_limited"), (3, "succeeded", None)]
    assert clock.now() - start == pytest.approx(6.0)
    retries = [e.detail for e in runtime.audit(status.run.id) if e.event == "retry_scheduled"]
    assert [r["delay_s"] for r in retries] == [1.0, 5.0]


def test_a_retry_further_away_than_the_sleep_threshold_settles_the_drive(runtime, flaky, clock):
    flaky(StepError("rate_limited", "429", retry_after=60.0))
    plan = make_plan(S("call", "action", action="t.flaky", retry=retry("rate_limited")))
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "running" and status.waiting == {"step": "call", "kind": "retry",
                                                            "due_at": clock.now() + 60}
    clock.advance(60)
    assert runtime.drive(status.run.id).state == "completed"


def test_retries_exhausted_fail_the_run_into_the_dead_letters(runtime, flaky):
    fn = flaky(*[TimeoutError("slow")] * 5)
    plan = make_plan(S("call", "action", action="t.flaky", retry=retry("timeout", max_attempts=3)))
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "failed" and fn.calls == 3
    assert status.error == ("timeout", "slow")
    (letter,) = runtime.dlq_list()
    assert letter.run_id == status.run.id and letter.error_class == "timeout" and "call" in letter.reason
    assert letter.fingerprint.startswith("sha256:")


@pytest.mark.parametrize("error", [StepError("invalid_request", "bad"), StepError("unauthorized", "no"),
                                   PermissionError("denied"), ValueError("bug")])
def test_a_never_retryable_class_fails_at_once(runtime, flaky, error):
    # Given a policy that (wrongly) lists every class, and an action raising a never-retryable one
    fn = flaky(error, error, error)
    policy = retry("invalid_request", "unauthorized", "internal", max_attempts=5)
    status = runtime.run(make_plan(S("call", "action", action="t.flaky", retry=policy)), {}, initiator="u")
    # Then there is exactly one attempt
    assert status.state == "failed" and fn.calls == 1 and len(status.attempts) == 1


def test_a_class_not_listed_by_the_policy_is_not_retried(runtime, flaky):
    fn = flaky(ConnectionError("x"), result=1)
    status = runtime.run(make_plan(S("call", "action", action="t.flaky", retry=retry("timeout"))), {}, initiator="u")
    assert status.error[0] == "network" and fn.calls == 1


def test_a_blocking_action_times_out_and_its_late_return_changes_nothing(runtime, registry):
    # Given an action blocked in a wait that ignores exceptions, with a 200 ms timeout
    release, returned, calls = threading.Event(), threading.Event(), []

    @action("t.block", registry=registry)
    def block(ctx):
        calls.append(ctx.attempt)
        release.wait(10)
        returned.set()
        return {"late": True}

    @action("t.after", registry=registry)
    def after(ctx):
        return "went on"

    plan = make_plan(S("slow", "action", action="t.block", timeout_ms=200, on_error=({"errors": ("timeout",),
                                                                                      "next": "recover"},)),
                     S("never", "fail", fail={"error": "internal", "message": "not here"}),
                     S("recover", "action", action="t.after"),
                     output="${{ steps.recover.output }}")
    # When it runs
    started = time.monotonic()
    status = runtime.run(plan, {}, initiator="u")
    # Then the attempt timed out in about 200 ms and the run moved on
    assert time.monotonic() - started < 3
    assert status.state == "completed" and status.output == "went on"
    slow = status.attempts[0]
    assert (slow.state, slow.error_class) == ("timed_out", "timeout")
    before = (runtime.store.get_run(status.run.id), runtime.store.attempts(status.run.id),
              runtime.audit(status.run.id))
    # When the abandoned thread finally returns
    release.set()
    assert returned.wait(5)
    time.sleep(0.05)
    # Then nothing changed
    after_ = (runtime.store.get_run(status.run.id), runtime.store.attempts(status.run.id),
              runtime.audit(status.run.id))
    assert after_ == before and calls == [1]


def test_a_timed_out_attempt_is_retried_when_the_policy_says_so(runtime, registry):
    release = threading.Event()
    calls = []

    @action("t.slow_once", registry=registry)
    def slow_once(ctx):
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(5)
        return ctx.attempt

    plan = make_plan(S("s", "action", action="t.slow_once", timeout_ms=400, retry=retry("timeout", initial_ms=10)),
                     output="${{ steps.s.output }}")
    status = runtime.run(plan, {}, initiator="u")
    release.set()
    assert status.output == 2 and calls == [1, 2]
    assert [a.state for a in status.attempts] == ["timed_out", "succeeded"]


def test_on_error_routes_after_retries_are_exhausted(runtime, flaky):
    fn = flaky(*[ConnectionError("down")] * 3)
    plan = make_plan(
        S("call", "action", action="t.flaky", retry=retry("network", max_attempts=2),
          on_error=({"errors": ("network", "timeout"), "next": "fallback"},)),
        S("skipped_over", "fail", fail={"error": "internal", "message": "no"}),
        S("fallback", "set", assign={"used": "steps.call.status"}),
        output="${{ steps.fallback.output.used }}",
    )
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "completed" and status.output == "failed" and fn.calls == 2
    assert any(e.event == "on_error" for e in runtime.audit(status.run.id))
    assert runtime.dlq_list() == []


def test_on_error_to_end_completes_the_run(runtime, flaky):
    flaky(StepError("policy_denied", "refused"))
    plan = make_plan(S("call", "action", action="t.flaky", on_error=({"errors": ("policy_denied",), "next": "end"},)),
                     S("more", "succeed"), output="handled")
    status = runtime.run(plan, {}, initiator="u")
    assert (status.state, status.output) == ("completed", "handled")


def test_on_error_does_not_catch_other_classes(runtime, flaky):
    flaky(StepError("unauthorized", "no"))
    plan = make_plan(S("call", "action", action="t.flaky", on_error=({"errors": ("network",), "next": "end"},)))
    assert runtime.run(plan, {}, initiator="u").state == "failed"


def test_redrive_reruns_the_failed_step_on_the_original_plan_then_quarantines(runtime, flaky, registry):
    # Given a run whose second step fails permanently
    counts = {"first": 0}

    @action("t.first", registry=registry)
    def first(ctx):
        counts["first"] += 1
        return 1

    fn = flaky(StepError("unavailable", "CRM down for maintenance 12:00"),
               StepError("unavailable", "CRM down for maintenance 12:30"),
               StepError("unavailable", "CRM down for maintenance 13:00"))
    plan = make_plan(S("first", "action", action="t.first"), S("call", "action", action="t.flaky"))
    status = runtime.run(plan, {}, initiator="u")
    run_id = status.run.id
    assert status.state == "failed" and runtime.dlq_show(run_id)["dead_letter"]["status"] == "dead"
    # When it is redriven and fails the same way (same fingerprint: times are masked)
    redriven = runtime.dlq_redrive(run_id)
    assert redriven.state == "queued" and redriven.run.plan_digest == plan.digest
    status = runtime.drive(run_id)
    # Then it is quarantined, the first step never ran again
    assert status.state == "quarantined" and counts["first"] == 1 and fn.calls == 2
    letter = runtime.store.dead_letter(run_id)
    assert letter.quarantined and letter.redrive_count == 1
    with pytest.raises(Exception, match="quarantined"):
        runtime.dlq_redrive(run_id)


def test_redrive_that_succeeds_completes_the_run(runtime, flaky):
    fn = flaky(StepError("unavailable", "down"))
    plan = make_plan(S("call", "action", action="t.flaky"), output="${{ steps.call.output }}")
    run_id = runtime.run(plan, {}, initiator="u").run.id
    runtime.dlq_redrive(run_id, actor="user:ops")
    status = runtime.drive(run_id)
    assert status.state == "completed" and status.output == {"ok": True} and fn.calls == 2
    assert status.run.redrives == 1 and runtime.dlq_list() == []


def test_the_run_deadline_times_the_run_out(runtime, clock):
    plan = make_plan(S("pause", "wait", wait={"for_ms": 3_600_000}), S("done", "succeed"),
                     budget={"max_runtime_ms": 60_000})
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "waiting"
    clock.advance(61)
    status = runtime.drive(status.run.id)
    assert status.state == "timed_out" and status.error[0] == "timeout"
    assert runtime.dlq_list()[0].run_id == status.run.id
