"""The model options a step declares reach the provider: ``temperature`` and ``max_tokens`` of ``ai`` and
``agent`` steps (the no-silent-field walk names these tests)."""

from __future__ import annotations

from interp_helpers import FakeProvider, S, make_plan

from sealflow.dsl.plan import AgentPlan, AiPlan


def test_given_an_ai_step_with_a_temperature_when_run_then_the_request_carries_it(runtime, providers):
    # Given an ai step declaring temperature and max_tokens
    providers["m"] = model = FakeProvider({"ok": True})
    plan = make_plan(S("ask", "ai", ai=AiPlan(model="m", prompt_template="hi", temperature=0.3, max_tokens=64)))
    # When it runs, then the provider was asked with both
    assert runtime.run(plan, {}, initiator="u").state == "completed"
    assert (model.requests[0].temperature, model.requests[0].max_tokens) == (0.3, 64)


def test_given_an_agent_step_with_model_options_when_run_then_each_turn_carries_them(runtime, providers):
    # Given an agent step declaring system, temperature and max_tokens, and a model answering at once
    providers["m"] = model = FakeProvider({"answer": "done"})
    plan = make_plan(S("help", "agent", agent=AgentPlan(model="m", goal="help", system="be careful",
                                                        temperature=0.1, max_tokens=99, max_steps=3)))
    # When it runs, then the request carried them
    assert runtime.run(plan, {}, initiator="u").state == "completed"
    first = model.requests[0]
    assert (first.system, first.temperature, first.max_tokens) == ("be careful", 0.1, 99)
