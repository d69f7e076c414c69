"""``ai`` steps against a scripted provider: schema, validate, fallback, tokens and budgets."""

from __future__ import annotations

import pytest
from interp_helpers import FakeProvider, S, make_plan, retry

from sealflow.core.errors import StepError
from sealflow.dsl.plan import AgentPlan, AiPlan
from sealflow.runtime.submitting import ModelNotConfigured

SCHEMA = {"type": "object", "required": ["classification"],
          "properties": {"classification": {"enum": ["high", "low"]}, "reason": {"type": "string"}}}


def ai_step(model="m1", fallback=(), **kw):
    return S("classify", "ai", ai=AiPlan(model=model, fallback=tuple(fallback), prompt_template=
                                         "Classify ${{ input.lead }}", system="be brief", output_schema=SCHEMA,
                                         max_tokens=100), **kw)


def test_an_ai_step_renders_the_prompt_checks_the_output_and_counts_tokens(runtime, providers):
    providers["m1"] = model = FakeProvider({"classification": "high", "reason": "big"}, tokens=40, cost=0.02)
    status = runtime.run(make_plan(ai_step(), output="${{ steps.classify.output }}"), {"lead": "acme"},
                         initiator="u")
    assert status.state == "completed" and status.output == {"classification": "high", "reason": "big"}
    (request,) = model.requests
    assert (request.model, request.prompt, request.system, request.max_tokens) == ("m1", "Classify acme",
                                                                                    "be brief", 100)
    assert request.output_schema == SCHEMA and request.deadline is not None
    assert (status.run.tokens, status.run.cost_usd) == (40, pytest.approx(0.02))


def test_output_failing_the_schema_gets_one_repair_that_carries_the_errors(runtime, providers):
    # Given a model whose first answer fails the schema and whose second passes
    providers["m1"] = model = FakeProvider({"classification": "maybe"}, {"classification": "low"})
    plan = make_plan(ai_step(), output="${{ steps.classify.output }}")
    # When the step runs
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    # Then one attempt made two calls; the second prompt names the validation error; both are charged
    assert status.output == {"classification": "low"} and len(model.requests) == 2
    assert len(status.attempts) == 1
    repair = model.requests[1]
    assert repair.prompt.startswith("Classify x") and "classification" in repair.prompt and "schema" in repair.prompt
    assert status.run.tokens == 20


def test_output_still_failing_after_the_repair_is_invalid_output_and_retried(runtime, providers):
    providers["m1"] = model = FakeProvider({"classification": "maybe"}, {"classification": 3},
                                           {"classification": "low"})
    plan = make_plan(ai_step(retry=retry("invalid_output", initial_ms=10)), output="${{ steps.classify.output }}")
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.output == {"classification": "low"} and len(model.requests) == 3
    first = status.attempts[0]
    assert first.error_class == "invalid_output" and "after one repair attempt" in first.error_message
    assert status.run.tokens == 30  # every call is counted


def test_the_repair_records_the_layer_that_failed(runtime, providers):
    providers["m1"] = FakeProvider({"classification": "low", "reason": 7}, {"classification": "high", "reason": ""},
                                   {"classification": "high", "reason": "big"})
    plan = make_plan(ai_step(validations=({"check": "output.classification != 'high' or len(output.reason) > 0",
                                           "message": "a high lead needs a reason"},)))
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.error[0] == "invalid_output" and "a high lead needs a reason" in status.error[1]
    details = [e.detail for e in runtime.store.audit(status.run.id) if (e.detail or {}).get("repair")]
    assert details and details[-1]["repair"]["layer"] == "types"
    assert details[-1]["repair"]["second_layer"] == "business_rule" and details[-1]["repair"]["passed"] is False


def test_validate_rules_apply_to_model_output(runtime, providers):
    providers["m1"] = FakeProvider({"classification": "high", "reason": ""})
    plan = make_plan(ai_step(validations=({"check": "output.classification != 'high' or len(output.reason) > 0",
                                           "message": None},)))
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.error[0] == "invalid_output" and "validate rule failed" in status.error[1]


def test_fallback_models_are_tried_when_the_first_is_unavailable(runtime, providers):
    providers["m1"] = FakeProvider(StepError("unavailable", "503"))
    providers["keyless"] = FakeProvider(StepError("configuration", "the model's API key secret is missing"))
    providers["m2"] = backup = FakeProvider({"classification": "low"})
    plan = make_plan(ai_step(fallback=("keyless", "m2")), output="${{ steps.classify.output }}")
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.output == {"classification": "low"} and backup.requests[0].model == "m2"


def test_an_unknown_model_is_refused_at_submit_and_nothing_is_created(runtime):
    with pytest.raises(ModelNotConfigured, match="'nope'"):
        runtime.submit(make_plan(ai_step(model="nope")), {"lead": "x"}, initiator="u")
    assert runtime.store.active_runs() == []


def test_a_model_gone_from_the_executing_process_leaves_the_step_for_one_that_serves_it(runtime, providers):
    # Given a run submitted while the model was served, then the model removed from this process
    providers["m1"] = FakeProvider({"classification": "low"})
    run_id = runtime.submit(make_plan(ai_step(model="m1")), {"lead": "x"}, initiator="u")
    del providers["m1"]
    # When it is driven, then the step is left as it was (engine/capability.py), naming the model
    status = runtime.drive(run_id)
    assert status.error == (None, None) and status.waiting["lacks"] == [["model", "m1"]]
    assert [a.state for a in status.attempts] == ["scheduled"]
    # And once the model is served again, the step runs when its message is sent again
    providers["m1"] = FakeProvider({"classification": "low"})
    runtime.clock.advance(runtime.redeliver_after + 1)
    assert runtime.drive(run_id).state == "completed"


def test_the_token_budget_stops_the_run(runtime, providers):
    providers["m1"] = FakeProvider({"classification": "low"}, tokens=600)
    plan = make_plan(ai_step(), S("again", "ai", ai=AiPlan(model="m1", prompt_template="x")),
                     budget={"max_tokens": 1000})
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.error[0] == "budget_exceeded" and status.run.tokens == 1200


def test_an_agent_step_with_an_unknown_model_is_refused_at_submit(runtime):
    plan = make_plan(S("agent", "agent", agent=AgentPlan(model="m1", goal="do it", max_steps=3)))
    with pytest.raises(ModelNotConfigured, match="'m1'"):
        runtime.submit(plan, {}, initiator="u")


def test_the_cost_budget_stops_the_run(runtime, providers):
    providers["m1"] = FakeProvider({"classification": "low"}, cost=0.30)
    plan = make_plan(ai_step(), S("again", "ai", ai=AiPlan(model="m1", prompt_template="x")),
                     budget={"max_cost_usd": 0.50})
    status = runtime.run(plan, {"lead": "x"}, initiator="u")
    assert status.error[0] == "budget_exceeded" and "max_cost_usd" in status.error[1]
    assert status.run.cost_usd == pytest.approx(0.60)


def test_each_call_is_audited_with_prompt_model_and_schema_digest_and_status_shows_usage_per_step(runtime,
                                                                                                    providers):
    from sealflow.runtime.status import status_json
    from sealflow.steps.ai import schema_digest

    # Given a step whose prompt comes from a prompt file, and a model that reports its own id
    providers["m1"] = FakeProvider({"classification": "maybe"}, {"classification": "low"}, tokens=30, cost=0.01)
    step = S("classify", "ai", ai=AiPlan(model="m1", prompt_template="Classify", prompt_ref={"id": "triage",
                                                                                             "version": 3},
                                         output_schema=SCHEMA, max_tokens=100))
    # When it runs (one repair)
    status = runtime.run(make_plan(step), {}, initiator="u")
    # Then the audit names, per call, the prompt file, the model the provider reported and the schema digest
    (detail,) = [e.detail for e in runtime.store.audit(status.run.id) if (e.detail or {}).get("calls")]
    assert [c["repair"] for c in detail["calls"]] == [False, True]
    for c in detail["calls"]:
        assert c["prompt"] == {"id": "triage", "version": 3} and c["provider_model"] == "m1"
        assert c["schema_digest"] == schema_digest(SCHEMA) and c["schema_digest"].startswith("sha256:")
    # and status --json shows the step's tokens and cost next to the run's
    shown = status_json(runtime.status(status.run.id))
    (entry,) = shown["steps"]
    assert entry["usage"] == {"tokens": 60, "cost_usd": pytest.approx(0.02)}
    assert shown["usage"]["tokens"] == 60
