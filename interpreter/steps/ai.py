"""``ai``: one model call through a provider, its output checked before anyone uses it.

The prompt template is rendered; the provider serving ``model`` is asked
(then each ``fallback`` model in turn when a provider is ``unavailable``, not
``configuration``-ready, or behind an open circuit breaker: ``circuit_open``; a model configured with
``circuit_breaker:`` in the ``models:`` section is called through breaker ``model:<name>``, shared in
the store); the answer must satisfy ``output_schema``
(else ``invalid_output``, retryable when the retry class lists it). Tokens and
cost are reported with the outcome even when the output is refused; the engine
charges them and enforces the budgets (:mod:`sealflow.interpreter.policy.budgets`).
"""

from __future__ import annotations

from sealflow.dsl import expressions
from sealflow.interpreter.core.errors import StepError
from sealflow.interpreter.core.outcomes import Failed, Outcome, Succeeded
from sealflow.interpreter.execution.breakers import through_model
from sealflow.interpreter.execution.calls import call
from sealflow.interpreter.execution.context import Execution
from sealflow.interpreter.steps.checks import schema_failure

FALLBACK_ON = ("unavailable", "configuration", "circuit_open")


def execute(x: Execution) -> Outcome:
    from sealflow.interpreter.providers.base import ModelRequest

    ai = x.step.ai
    prompt = expressions.to_text(x.render(ai.prompt_template or ""))
    system = expressions.to_text(x.render(ai.system)) if ai.system else None
    failure: Failed | None = None
    for model in (ai.model, *ai.fallback):
        try:
            provider = x.services.provider_for(model)
        except StepError as exc:
            failure = Failed(exc.error_class, exc.message, exc.retry_after)
            if exc.error_class in FALLBACK_ON:
                continue
            return failure
        request = ModelRequest(model=model, prompt=prompt, system=system, output_schema=ai.output_schema,
                               max_tokens=ai.max_tokens, temperature=ai.temperature,
                               idempotency_key=f"{x.run.id}:{x.step_id}:{x.attempt.attempt}", deadline=x.deadline())
        outcome = through_model(x, model, provider,
                                lambda p=provider, r=request: call(x, lambda ctx: p.complete(r), None))
        if isinstance(outcome, Failed):
            failure = outcome
            if outcome.error_class in FALLBACK_ON:
                continue
            return outcome
        return _checked(x, model, outcome.output)
    return failure or Failed("configuration", "the ai step names no model")


def _checked(x: Execution, model: str, result) -> Outcome:
    tokens = int(getattr(result, "total_tokens", 0) or 0)
    cost = float(getattr(result, "cost_usd", 0.0) or 0.0)
    used = {"tokens": tokens, "cost_usd": cost}
    output = result.output
    problem = schema_failure(x, x.step.ai.output_schema, output)
    if problem is not None:
        return Failed("invalid_output", problem, **used)
    return Succeeded(output, detail={"model": getattr(result, "model", "") or model}, **used)

