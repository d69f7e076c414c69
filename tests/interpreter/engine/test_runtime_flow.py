"""Runs end to end on the embedded default: step kinds and control flow."""

from __future__ import annotations

import os

import pytest
from interp_helpers import S, make_plan

from sealflow.core.errors import StepError
from sealflow.execution.actions import action


@pytest.fixture
def effects(registry):
    """Test actions on the private registry; ``effects`` lists every call."""
    calls: list = []

    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        calls.append((ctx.step_id, kw))
        return kw

    @action("t.lead", registry=registry)
    def lead(ctx, lead_id):
        calls.append((ctx.step_id, lead_id))
        return {"id": lead_id, "score": 80 if lead_id.endswith("big") else 10, "email": f"{lead_id}@example.com"}

    return calls


def test_a_straight_run_completes_with_its_output(runtime, effects):
    # Given three action steps feeding each other, and a plan output
    plan = make_plan(
        S("fetch", "action", action="t.lead", args={"lead_id": "${{ input.lead_id }}"}),
        S("note", "action", action="t.echo", args={"text": "score ${{ steps.fetch.output.score }}"}),
        S("mail", "action", action="t.echo", args={"to": "${{ steps.fetch.output.email }}", "n": "${{ 1 + 1 }}"}),
        output={"lead": "${{ steps.fetch.output.id }}", "sent": "${{ steps.mail.output }}"},
    )
    # When it is submitted and driven
    status = runtime.run(plan, {"lead_id": "lead_1"}, initiator="user:ana")
    # Then every step ran once, in order, with rendered arguments, and the output is rendered
    assert status.state == "completed"
    assert effects == [("fetch", "lead_1"), ("note", {"text": "score 10"}),
                       ("mail", {"to": "lead_1@example.com", "n": 2})]
    assert status.output == {"lead": "lead_1", "sent": {"to": "lead_1@example.com", "n": 2}}
    assert status.step_states() == {"fetch": "succeeded", "note": "succeeded", "mail": "succeeded"}
    assert status.run.steps_executed == 3
    events = [e.event for e in runtime.audit(status.run.id)]
    assert events[:2] == ["run.created", "run.queued"] and events[-1] == "run.completed"


def test_switch_takes_the_first_true_branch_else_the_default(runtime, effects):
    plan = make_plan(
        S("fetch", "action", action="t.lead", args={"lead_id": "${{ input.id }}"}),
        S("route", "switch", switch=({"when": "steps.fetch.output.score > 50", "next": "big"},
                                     {"when": None, "next": "small"})),
        S("big", "set", assign={"kind": "'big'"}, next="end"),
        S("small", "set", assign={"kind": "'small'"}),
        output="${{ default(steps.big.output.kind, steps.small.output.kind) }}",
    )
    big = runtime.run(plan, {"id": "lead_big"}, initiator="user:a")
    small = runtime.run(plan, {"id": "lead_tiny"}, initiator="user:a")
    assert (big.output, small.output) == ("big", "small")
    assert "small" not in big.step_states() and "big" not in small.step_states()
    assert [a.step_id for a in big.attempts] == ["fetch", "route", "big"]
    assert big.attempts[1].output == {"branch": 0, "next": "big"}


def test_switch_without_a_match_or_default_goes_to_next(runtime):
    plan = make_plan(
        S("route", "switch", switch=({"when": "input.n > 5", "next": "end"},)),
        S("after", "set", assign={"seen": "true"}),
        output="${{ steps.after.output.seen }}",
    )
    assert runtime.run(plan, {"n": 1}, initiator="u").output is True
    assert runtime.run(plan, {"n": 9}, initiator="u").output is None


def test_set_evaluates_expressions_into_its_output(runtime):
    plan = make_plan(S("calc", "set", assign={"total": "input.a * 2 + 1", "name": "upper(input.who)", "k": 3}),
                     output="${{ steps.calc.output }}")
    assert runtime.run(plan, {"a": 4, "who": "ana"}, initiator="u").output == {"total": 9, "name": "ANA", "k": 3}


def test_when_false_skips_the_step_and_goes_on(runtime, effects):
    plan = make_plan(
        S("maybe", "action", action="t.echo", args={"x": 1}, when="input.go"),
        S("always", "action", action="t.echo", args={"x": 2}),
        output="${{ steps.maybe.status }}",
    )
    status = runtime.run(plan, {"go": False}, initiator="u")
    assert effects == [("always", {"x": 2})]
    assert status.step_states()["maybe"] == "skipped" and status.output == "skipped"


def test_a_skipped_succeed_step_goes_to_its_next(runtime):
    plan = make_plan(S("stop", "succeed", when="input.stop", succeed_output="early"),
                     S("late", "set", assign={"v": "'late'"}), output="${{ steps.late.output.v }}")
    assert runtime.run(plan, {"stop": True}, initiator="u").output == "early"
    assert runtime.run(plan, {"stop": False}, initiator="u").output == "late"


def test_fail_ends_the_run_with_its_class_and_rendered_message(runtime, effects):
    plan = make_plan(S("no", "fail", fail={"error": "policy_denied", "message": "lead ${{ input.id }} is blocked"}),
                     S("never", "action", action="t.echo"))
    status = runtime.run(plan, {"id": "x1"}, initiator="u")
    assert status.state == "failed" and status.error == ("policy_denied", "lead x1 is blocked")
    assert effects == []
    assert runtime.dlq_list()[0].run_id == status.run.id


def test_succeed_ends_the_run_with_its_output_or_the_plans(runtime, effects):
    plan = make_plan(S("done", "succeed", succeed_output={"ok": "${{ input.x }}"}),
                     S("never", "action", action="t.echo"), output="plan output")
    assert runtime.run(plan, {"x": 1}, initiator="u").output == {"ok": 1}
    plain = make_plan(S("done", "succeed"), output="${{ input.x }}")
    assert runtime.run(plain, {"x": 5}, initiator="u").output == 5
    assert effects == []


def test_a_short_wait_is_slept_through(runtime, clock):
    plan = make_plan(S("pause", "wait", wait={"for_ms": 2_000}), S("after", "set", assign={"t": "now()"}),
                     output="${{ steps.after.output.t }}")
    start = clock.now()
    status = runtime.run(plan, {}, initiator="u")
    assert status.state == "completed" and status.output >= start + 2


def test_a_long_wait_is_a_durable_timer_and_the_run_settles_waiting(runtime, clock):
    # Given a one-hour wait
    plan = make_plan(S("pause", "wait", wait={"for_ms": 3_600_000}), S("after", "set", assign={"ok": "true"}))
    status = runtime.run(plan, {}, initiator="u")
    # Then the run settles waiting, with a timer in the store and no message in the broker
    assert status.state == "waiting" and status.waiting["kind"] == "wait"
    (timer,) = runtime.store.timers(status.run.id)
    assert timer.kind == "wait" and timer.fire_at == pytest.approx(clock.now() + 3600)
    assert runtime.broker.queues["sealflow"].qsize() == 0
    # When the hour passes
    clock.advance(3600)
    # Then the run goes on
    assert runtime.drive(status.run.id).state == "completed"


def test_wait_until_accepts_epoch_seconds_and_iso_timestamps(runtime, clock):
    iso = make_plan(S("pause", "wait", wait={"until": "'2023-11-14T22:14:00Z'"}), S("done", "succeed"))
    epoch = make_plan(S("pause", "wait", wait={"until": "now() + duration('2s')"}), S("done", "succeed"))
    assert clock.now() < 1_700_000_040  # 2023-11-14T22:14:00Z
    assert runtime.run(iso, {}, initiator="u").state == "waiting"
    assert runtime.run(epoch, {}, initiator="u").state == "completed"
    bad = make_plan(S("pause", "wait", wait={"until": "'tomorrow'"}))
    status = runtime.run(bad, {}, initiator="u")
    assert status.error[0] == "invalid_request" and "ISO-8601" in status.error[1]


def test_an_unknown_action_is_left_for_a_process_that_has_it_not_failed(runtime, registry):
    # Given a step whose action this process has not loaded, When the run is driven here
    status = runtime.run(make_plan(S("x", "action", action="t.missing")), {}, initiator="u")
    # Then the step is left as it was (engine/capability.py): no attempt used, no failure, what is missing named
    assert status.state == "queued" and status.error == (None, None)
    assert [(a.step_id, a.state) for a in status.attempts] == [("x", "scheduled")]
    assert status.waiting["lacks"] == [["action", "t.missing"]] and "--actions MODULE" in status.waiting["how"][0]
    # And once the action is there, its message sent again runs it
    action("t.missing", registry=registry)(lambda ctx: {"ok": True})
    runtime.clock.advance(runtime.redeliver_after + 1)
    assert runtime.drive(status.run.id).state == "completed"


def test_an_expression_error_fails_the_step_as_invalid_request(runtime, effects):
    plan = make_plan(S("x", "action", action="t.echo", args={"n": "${{ input.name + 1 }}"}))
    status = runtime.run(plan, {"name": "ana"}, initiator="u")
    assert status.state == "failed" and status.error[0] == "invalid_request"


def test_an_action_returning_something_not_json_fails_as_internal(runtime, registry):
    @action("t.weird", registry=registry)
    def weird(ctx):
        return {1, 2}

    status = runtime.run(make_plan(S("x", "action", action="t.weird")), {}, initiator="u")
    assert status.error[0] == "internal" and "not JSON" in status.error[1]


def test_validate_rules_fail_the_output_as_invalid_output(runtime, effects):
    plan = make_plan(S("x", "action", action="t.echo", args={"score": "${{ input.s }}"},
                       validations=({"check": "output.score >= 0", "message": "score must be >= 0"},)))
    assert runtime.run(plan, {"s": 3}, initiator="u").state == "completed"
    status = runtime.run(plan, {"s": -1}, initiator="u")
    assert status.error == ("invalid_output", "score must be >= 0")


def test_the_ctx_carries_ids_and_a_deadline(runtime, registry, clock):
    seen = {}

    @action("t.ctx", registry=registry)
    def look(ctx):
        seen.update(run_id=ctx.run_id, step_id=ctx.step_id, attempt=ctx.attempt, tenant=ctx.tenant,
                    deadline=ctx.deadline, cancelled=ctx.cancelled(), secrets=dict(ctx.secrets),
                    tempdir=os.path.isdir(ctx.tempdir))
        ctx.log.info("hello")
        return None

    status = runtime.run(make_plan(S("look", "action", action="t.ctx", timeout_ms=7000)), {}, initiator="u",
                         tenant="acme")
    assert seen == {"run_id": status.run.id, "step_id": "look", "attempt": 1, "tenant": "acme",
                    "deadline": pytest.approx(clock.now() + 7), "cancelled": False, "secrets": {}, "tempdir": True}


def test_invalid_input_is_refused_at_submit(runtime):
    plan = make_plan(S("x", "succeed"), input_schema={"type": "object", "required": ["lead_id"]})
    with pytest.raises(StepError, match="lead_id"):
        runtime.submit(plan, {}, initiator="u")


def test_max_steps_budget_stops_a_loop(runtime):
    plan = make_plan(S("spin", "switch", switch=({"when": "true", "next": "spin"},)),
                     budget={"max_steps": 5})
    status = runtime.run(plan, {}, initiator="u")
    assert status.error[0] == "budget_exceeded" and status.run.steps_executed == 5


def test_cancel_a_waiting_run(runtime):
    plan = make_plan(S("pause", "wait", wait={"for_ms": 3_600_000}), S("after", "succeed"))
    status = runtime.run(plan, {}, initiator="u")
    cancelled = runtime.cancel(status.run.id, actor="user:ana", reason="changed my mind")
    assert cancelled.state == "cancelled" and runtime.store.timers(status.run.id) == []
    assert cancelled.step_states() == {"pause": "cancelled"}


def test_an_action_mutating_its_arguments_does_not_change_earlier_outputs(runtime, registry):
    @action("t.make", registry=registry)
    def make(ctx):
        return {"items": [1, 2]}

    @action("t.mutate", registry=registry)
    def mutate(ctx, data):
        data["items"].append(99)
        return len(data["items"])

    plan = make_plan(S("a", "action", action="t.make"), S("b", "action", action="t.mutate",
                                                          args={"data": "${{ steps.a.output }}"}),
                     S("c", "action", action="t.mutate", args={"data": "${{ steps.a.output }}"}),
                     output="${{ [steps.a.output, steps.b.output, steps.c.output] }}")
    assert runtime.run(plan, {}, initiator="u").output == [{"items": [1, 2]}, 3, 3]


def test_a_forged_or_stale_message_for_a_step_this_process_lacks_is_refused_and_audited_not_left(runtime):
    # Given a run of tenant "default" whose step this process lacks, left as it was
    status = runtime.run(make_plan(S("x", "action", action="t.absent")), {}, initiator="u")
    (att,) = status.attempts
    run_id = status.run.id
    runtime.engine.left.clear()
    # When a message names another tenant, or carries a token that is not the attempt's
    assert runtime.engine.handle(run_id, "x", att.attempt, att.token, "globex").messages == ()
    assert runtime.engine.handle(run_id, "x", att.attempt, att.token + 7, "default").messages == ()
    # Then each is refused by the claim and audited (as for a step this process could run), not taken for a
    # step left for a capable process: status does not say it waits for one on their word
    refused = [e.detail["reason"] for e in runtime.store.audit(run_id) if e.event == "message_refused"]
    assert refused == ["tenant_mismatch", "stale_token"]
    assert run_id not in runtime.engine.left
    assert [(a.step_id, a.state) for a in runtime.status(run_id).attempts] == [("x", "scheduled")]


def test_the_plan_cache_of_a_long_lived_engine_is_bounded(runtime, monkeypatch):
    # Given an engine that keeps at most 2 plans in memory
    from sealflow.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "PLANS_MAX", 2)
    # When it runs 5 different plans, one after the other, and then the first one again
    plans = [make_plan(S("a", "succeed"), S("b", "succeed"), name=f"flow-{i}") for i in range(5)]
    states = [runtime.run(plan, {}, initiator="u").state for plan in plans + plans[:1]]
    # Then every run completes, and the engine holds no more than 2 plans (and their step indexes)
    assert states == ["completed"] * 6
    assert len(runtime.engine._plans) <= 2 and len(runtime.engine._steps) <= 2
