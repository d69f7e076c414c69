"""Budgets: checked before each attempt, charged with each result; `budget_exceeded` is never retried."""

from __future__ import annotations

import pytest
from interp_helpers import FakeProvider, S, make_plan, retry

from sealflow.dsl.plan import AiPlan, ErrorRoutePlan, StepBudgetPlan
from sealflow.execution.actions import action
from sealflow.policy.budgets import day_of


def ai(step_id="think", max_tokens=100, **kw):
    return S(step_id, "ai", ai=AiPlan(model="m1", prompt_template="think", max_tokens=max_tokens), **kw)


def test_a_loop_hits_max_steps_and_is_not_retried(runtime):
    # Given a loop with a retry policy that even names budget_exceeded and an on_error route for it
    plan = make_plan(S("spin", "switch", switch=({"when": "true", "next": "spin"},),
                       retry=retry("budget_exceeded", "timeout", max_attempts=5),
                       on_error=(ErrorRoutePlan(errors=("budget_exceeded",), next="rescue"),)),
                     S("rescue", "succeed"), budget={"max_steps": 4})
    # When it runs
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then it stops with budget_exceeded after exactly 4 executed attempts: the refused 5th is not retried,
    # and a run budget takes no on_error route
    assert status.state == "failed" and status.error[0] == "budget_exceeded"
    assert "budget.max_steps" in status.error[1] and status.run.steps_executed == 4
    assert [a.state for a in status.attempts] == ["succeeded"] * 4 + ["failed"]
    assert "rescue" not in status.step_states()
    assert runtime.dlq_list()[0].error_class == "budget_exceeded"


def test_a_run_past_its_max_runtime_times_out_and_its_next_step_does_not_start(runtime, registry, clock):
    calls = []

    @action("t.work", registry=registry)
    def work(ctx):
        calls.append(1)

    # Given a run whose deadline passes before a worker picks up its first step (the worker checks it:
    # the sweeper's deadline timer has not fired yet)
    runtime.start()
    plan = make_plan(S("work", "action", action="t.work"), budget={"max_runtime_ms": 60_000})
    run_id = runtime.submit(plan, {}, initiator="user:ana")
    clock.advance(61)
    # When it is driven
    status = runtime.drive(run_id)
    # Then it is timed_out, the step never ran, and it is in the dead-letter list
    assert status.state == "timed_out" and status.error[0] == "timeout" and calls == []
    assert "max_runtime" in status.error[1] and status.step_states() == {"work": "timed_out"}
    assert runtime.dlq_list()[0].run_id == run_id


def test_a_run_waiting_in_backoff_past_its_max_runtime_times_out(runtime, registry):
    @action("t.flaky", registry=registry)
    def flaky(ctx):
        raise ConnectionError("down")

    plan = make_plan(S("call", "action", action="t.flaky", retry=retry("network", max_attempts=5, initial_ms=40_000)),
                     budget={"max_runtime_ms": 60_000})
    status = runtime.run(plan, {}, initiator="user:ana", until="final")
    # Then the deadline (60s) cuts the third try's backoff (due at 120s): it never runs
    assert status.state == "timed_out" and [a.state for a in status.attempts] == ["failed", "failed", "cancelled"]


def test_a_model_call_that_could_exceed_the_token_budget_is_refused_before_it_is_made(runtime, providers):
    # Given a run that used 950 of its 1000 tokens and a step that may use up to 100 more
    providers["m1"] = model = FakeProvider({"ok": True}, tokens=950)
    plan = make_plan(ai("first", max_tokens=1000), ai("second", max_tokens=100), budget={"max_tokens": 1000})
    # When it runs
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the second call is not made: its worst case would exceed the budget
    assert status.error[0] == "budget_exceeded" and "budget.max_tokens of 1000" in status.error[1]
    assert "up to 100 more" in status.error[1]
    assert len(model.requests) == 1 and status.run.tokens == 950 and status.run.steps_executed == 1


def test_a_call_that_went_over_the_token_budget_is_charged_and_fails_the_run(runtime, providers):
    providers["m1"] = FakeProvider({"ok": True}, tokens=600)
    plan = make_plan(ai("first", max_tokens=None), ai("second", max_tokens=None,
                                                      on_error=(ErrorRoutePlan(errors=("budget_exceeded",),
                                                                               next="rescue"),)),
                     S("rescue", "succeed"), budget={"max_tokens": 1000})
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then both calls are charged, and the run budget ends the run (no on_error route for run budgets)
    assert status.state == "failed" and status.run.tokens == 1200 and "rescue" not in status.step_states()


def test_the_cost_budget_refuses_a_call_once_spent(runtime, providers):
    providers["m1"] = model = FakeProvider({"ok": True}, cost=0.50)
    plan = make_plan(ai("first"), ai("second"), budget={"max_cost_usd": 0.50})
    status = runtime.run(plan, {}, initiator="user:ana")
    assert status.error[0] == "budget_exceeded" and "max_cost_usd" in status.error[1]
    assert len(model.requests) == 1 and status.run.cost_usd == pytest.approx(0.50)


def test_a_step_budget_fails_the_step_and_on_error_may_route_it(runtime, providers):
    # Given a step whose worst case (ai.max_tokens 400) is over its own budget of 300, with a route
    providers["m1"] = model = FakeProvider({"ok": True})
    plan = make_plan(ai("pricey", max_tokens=400, budget=StepBudgetPlan(max_tokens=300),
                        retry=retry("budget_exceeded", max_attempts=3),
                        on_error=(ErrorRoutePlan(errors=("budget_exceeded",), next="cheap"),)),
                     S("cheap", "set", assign={"used": "'fallback'"}), output="${{ steps.cheap.output }}")
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the model is not called, the step is not retried, and the route is taken
    assert status.state == "completed" and status.output == {"used": "fallback"} and model.requests == []
    assert [a.state for a in status.attempts if a.step_id == "pricey"] == ["failed"]


def test_a_step_that_used_more_than_its_own_budget_fails(runtime, providers):
    providers["m1"] = FakeProvider({"ok": True}, tokens=500, cost=0.2)
    status = runtime.run(make_plan(ai("one", max_tokens=None, budget=StepBudgetPlan(max_cost_usd=0.1))), {},
                         initiator="user:ana")
    assert status.error[0] == "budget_exceeded" and "budget.max_cost_usd of 0.1" in status.error[1]
    assert status.run.cost_usd == pytest.approx(0.2)


def test_usage_is_charged_to_the_run_and_to_the_tenants_day(runtime, providers, clock):
    providers["m1"] = FakeProvider({"ok": True}, tokens=40, cost=0.01)
    plan = make_plan(ai("one"), ai("two"))
    for tenant in ("acme", "acme", "globex"):
        runtime.run(plan, {}, initiator="user:ana", tenant=tenant)
    tokens, cost = runtime.store.tenant_usage("acme", day_of(clock.now()))
    assert tokens == 160 and cost == pytest.approx(0.04)
    assert runtime.store.tenant_usage("globex", day_of(clock.now()))[0] == 80
    assert runtime.store.tenant_usage("acme", day_of(clock.now()) + 1) == (0, 0.0)
