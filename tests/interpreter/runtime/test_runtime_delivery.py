"""At-least-once delivery made safe: duplicates, forgeries, idempotent effects and submits, cancel."""

from __future__ import annotations

import threading

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.engine.engine import Handled
from sealflow.execution.actions import action
from sealflow.store import IdempotencyConflict, Message


@pytest.fixture
def counted(registry):
    """``t.effect`` counts its calls per step; ``t.after`` too."""
    calls: list = []

    @action("t.effect", registry=registry, effect="irreversible")
    def effect(ctx, to="x"):
        calls.append((ctx.step_id, ctx.idempotency_key))
        return {"sent_to": to, "key": ctx.idempotency_key}

    return calls


def messages_of(runtime, run_id):
    """The messages that scheduled each attempt (a claim moves the token on by one)."""
    return [Message(a.run_id, a.step_id, a.attempt, a.token - 1) for a in runtime.store.attempts(run_id)]


def test_duplicate_messages_after_the_fact_cause_no_second_effect(runtime, counted):
    # Given a completed run of two effects
    plan = make_plan(S("one", "action", action="t.effect"), S("two", "action", action="t.effect"))
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "completed" and len(counted) == 2
    # When every one of its messages is delivered again, twice
    for message in messages_of(runtime, status.run.id) * 2:
        runtime.actor.send(*message)
    runtime.drive(status.run.id)
    # Then no effect ran again, and each duplicate was refused and audited
    assert len(counted) == 2
    refused = [e for e in runtime.audit(status.run.id) if e.event == "message_refused"]
    assert len(refused) == 4 and {e.detail["reason"] for e in refused} == {"stale_token"}


def test_messages_duplicated_in_flight_cause_no_second_effect(runtime, counted, monkeypatch):
    # Given a broker that delivers every message twice
    send = runtime.send
    runtime.dispatcher.send = lambda m, priority=None: (send(m, priority), send(m, priority))
    real = runtime.actor.send
    runtime.actor.send = lambda *m: (real(*m), real(*m))
    # (and every next-step message a commit makes due is duplicated too, so none is carried on in-thread)
    handle = runtime.engine.handle
    monkeypatch.setattr(runtime.engine, "handle", lambda *a, carry=False, claimed=None: Handled(
        tuple(m for due in handle(*a, claimed=claimed).messages for m in (due, due))))
    plan = make_plan(*[S(f"s{i}", "action", action="t.effect") for i in range(5)])
    # When a run goes through
    status = runtime.run(plan, {}, initiator="u")
    # Then each effect happened once
    assert status.state == "completed" and [c[0] for c in counted] == [f"s{i}" for i in range(5)]
    assert sum(e.event == "message_refused" for e in runtime.audit(status.run.id)) >= 5


def test_a_forged_message_is_refused_and_audited(runtime, counted):
    plan = make_plan(S("pause", "wait", wait={"for_ms": 3_600_000}), S("one", "action", action="t.effect"))
    status = runtime.run(plan, {}, initiator="u")
    before = runtime.store.attempts(status.run.id)
    # When someone sends made-up messages: a wrong token, an attempt that does not exist
    runtime.actor.send(status.run.id, "pause", 1, 123456789)
    runtime.actor.send(status.run.id, "one", 1, 1)
    runtime.actor.send("run_nope", "one", 1, 1)
    runtime.drive(status.run.id)
    # Then nothing ran, and the audit names the reasons
    assert counted == [] and runtime.store.attempts(status.run.id) == before
    reasons = [e.detail["reason"] for e in runtime.audit(status.run.id) if e.event == "message_refused"]
    assert sorted(reasons) == ["stale_token", "unknown_attempt"]  # two worker threads: any order


def test_an_idempotency_key_runs_the_effect_once_across_runs(runtime, counted):
    # Given a step whose key does not depend on the run
    plan = make_plan(S("mail", "action", action="t.effect", args={"to": "${{ input.to }}"},
                       idempotency_key="welcome:${{ input.to }}"), output="${{ steps.mail.output }}")
    # When two runs send to the same address
    first = runtime.run(plan, {"to": "ana@example.com"}, initiator="u")
    second = runtime.run(plan, {"to": "ana@example.com"}, initiator="u")
    # Then the action ran once; the second run replayed the recorded result, and says so
    assert counted == [("mail", "welcome:ana@example.com")]
    assert second.output == first.output == {"sent_to": "ana@example.com", "key": "welcome:ana@example.com"}
    replay = [e for e in runtime.audit(second.run.id) if e.event == "idempotent_replay"]
    assert replay[0].detail["recorded_by"] == first.run.id


def test_a_retry_after_the_effect_replays_the_ledger(runtime, registry):
    # Given an effect whose output fails validation the first time (the effect happened)
    calls = []

    @action("t.charge", registry=registry)
    def charge(ctx):
        calls.append(ctx.attempt)
        return {"charged": len(calls)}

    plan = make_plan(S("pay", "action", action="t.charge", idempotency_key="${{ run.id }}:pay",
                       validations=({"check": "output.charged > 1", "message": "looks wrong"},),
                       retry=retry("invalid_output", initial_ms=10)))
    status = runtime.run(plan, {}, initiator="u")
    # Then the retry did not charge again: it found the ledger entry (and failed the same check)
    assert calls == [1] and status.state == "failed" and status.error[0] == "invalid_output"
    assert len(status.attempts) == 3


def test_idempotent_submit_returns_the_same_run(runtime, counted):
    plan = make_plan(S("one", "action", action="t.effect"))
    a = runtime.submit(plan, {"x": 1}, initiator="u", idempotency_key="req-1")
    b = runtime.submit(plan, {"x": 1}, initiator="u", idempotency_key="req-1")
    assert a == b
    with pytest.raises(IdempotencyConflict):
        runtime.submit(plan, {"x": 2}, initiator="u", idempotency_key="req-1")
    runtime.drive(a)
    assert len(counted) == 1


def test_cancel_while_an_action_runs_stops_the_run_after_it(runtime, registry):
    # Given an action that cooperates with cancellation
    started, seen_cancel = threading.Event(), []

    @action("t.long", registry=registry)
    def long(ctx):
        started.set()
        for _ in range(200):
            if ctx.cancelled():
                seen_cancel.append(True)
                break
            threading.Event().wait(0.01)
        return "partial"

    plan = make_plan(S("long", "action", action="t.long", timeout_ms=10_000), S("next", "fail",
                                                                                fail={"error": "internal"}))
    run_id = runtime.submit(plan, {}, initiator="u")
    runner = threading.Thread(target=runtime.drive, args=(run_id,))
    runner.start()
    assert started.wait(5)
    # When the run is cancelled while the action runs
    assert runtime.cancel(run_id, actor="user:ana").state == "cancelling"
    runner.join(10)
    # Then the action saw it, its result is kept, and the run is cancelled without going on
    status = runtime.status(run_id)
    assert status.state == "cancelled" and seen_cancel == [True]
    assert status.step_states() == {"long": "succeeded"}


def test_an_engine_error_in_a_step_fails_it_as_internal(runtime, registry):
    @action("t.err", registry=registry)
    def err(ctx):
        raise StepError("unavailable", "x")

    status = runtime.run(make_plan(S("e", "action", action="t.err")), {}, initiator="u")
    assert status.error == ("unavailable", "x")
