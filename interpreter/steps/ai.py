"""``ai``: one model call through a provider, its output checked before anyone uses it.

The prompt template is rendered; the provider serving ``model`` is asked
(then each ``fallback`` model in turn when the call fails with a class of
:data:`~sealflow.core.errors.FALLS_BACK`: ``network``, ``timeout`` (the model's own, not the
attempt's), ``rate_limited``, ``unavailable``, ``configuration`` or ``circuit_open``; a model configured with
``circuit_breaker:`` in the ``models:`` section is called through breaker ``model:<name>``, shared in
the store); the answer must satisfy ``output_schema`` and the step's ``validate`` rules.

**Repair.** An answer that fails a check gets *at most one* repair attempt: the same model is asked
again with the validation errors appended to the prompt. The step's ``detail.repair`` records the
layer that failed (``schema``: not the JSON asked for or not matching ``output_schema``; ``types``: a
value of the wrong JSON type; ``business_rule``: a ``validate`` rule) and whether the repair passed.
A repaired answer that still fails is ``invalid_output`` (retryable when the retry class lists it).
An answer cut off at the token limit is not repaired.

**Rate limits.** A model configured with ``rate_limit:`` is asked only when its limiter, shared by every
worker, grants the call (:mod:`sealflow.policy.limits`); otherwise the next ``fallback`` model is
tried, and when every model is over its limit the attempt waits durably (a timer in the store, not a
failed attempt) until the first frees, then runs again from its start.

**Reservation.** Before each call the attempt's usage so far plus the call's worst case
(:func:`worst_case`; a step without ``max_tokens`` is capped at its model's configured ``max_tokens``, else
:data:`DEFAULT_MAX_TOKENS`) is
reserved against the step's budget and the tenant's daily quota (:func:`budgets.reserve`); a refused
reservation is ``budget_exceeded`` and the model is not called.

Tokens and cost are reported with the outcome even when the output is refused (both calls of a
repair, and the usage a provider attaches to a failure it was paid for as ``StepError.tokens`` /
``.cost_usd``); the engine charges them and enforces the budgets
(:mod:`sealflow.policy.budgets`). ``detail.model`` names the model that actually answered
(the fallback's, when the fallback answered); ``detail.calls`` audits every call: the configured model,
the model id and version the provider reports (``provider_model``), the prompt file's id and version
(``prompt``), the output schema's digest, its tokens and cost; the attempt's ``data.usage`` holds its
totals (``status --json`` shows them per step).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from sealflow.core.errors import FALLS_BACK, StepError
from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.dsl import expressions
from sealflow.execution.breakers import through_model
from sealflow.execution.calls import call
from sealflow.execution.context import Execution
from sealflow.policy import budgets, limits
from sealflow.steps.checks import schema_failure, validation_failure
from sealflow.steps.sections import section

if TYPE_CHECKING:
    from sealflow.dsl.plan import AiPlan
    from sealflow.execution.context import StepContext
    from sealflow.providers.base import ModelRequest, ModelResult, Provider

#: the validation layers a refused answer is recorded under
LAYERS = ("schema", "types", "business_rule", "permission", "risk")
#: a model call without ``max_tokens`` is capped here (and budgets reserve this worst case)
DEFAULT_MAX_TOKENS = 4096


def max_tokens_for(ai: AiPlan, provider: object = None) -> int:
    """The most output tokens one call of ``ai`` may use: its ``max_tokens``, else the model's configured
    ``max_tokens`` (``models:`` section), else :data:`DEFAULT_MAX_TOKENS`."""
    if ai.max_tokens is not None:
        return ai.max_tokens
    configured = getattr(getattr(provider, "config", None), "max_tokens", None)
    return configured if isinstance(configured, int) and configured > 0 else DEFAULT_MAX_TOKENS


def schema_digest(schema: dict[str, Any] | None) -> str | None:
    """``sha256:`` of the output schema as canonical JSON (None without a schema)."""
    if schema is None:
        return None
    canonical = json.dumps(schema, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Usage:
    """Tokens and cost of every call of this attempt (paid answers that failed included), and what each
    call was: audited in ``detail.calls``, the totals stored with the attempt (``data.usage``)."""

    def __init__(self) -> None:
        self.tokens, self.cost_usd = 0, 0.0
        self.calls: list[dict[str, Any]] = []
        self.prompt = ""  # the first request's prompt (a different one is the repair)

    def add(self, tokens: Any, cost: Any) -> None:
        self.tokens += int(tokens or 0)
        self.cost_usd += float(cost or 0.0)

    def call(self, x: Execution, model: str, request: ModelRequest, *, answered: str | None, tokens: Any, cost: Any,
             error: str | None = None) -> None:
        self.add(tokens, cost)
        ai = section(x, x.step.ai, "ai")
        entry: dict[str, Any] = {"model": model, "provider_model": answered, "prompt": ai.prompt_ref,
                 "schema_digest": schema_digest(ai.output_schema), "max_tokens": request.max_tokens,
                 "tokens": int(tokens or 0), "cost_usd": float(cost or 0.0), "repair": request.prompt != self.prompt}
        if error is not None:
            entry["error"] = error
        self.calls.append(entry)

    def as_kw(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "cost_usd": self.cost_usd,
                "data": {"usage": {"tokens": self.tokens, "cost_usd": self.cost_usd, "calls": len(self.calls)}}}

    def detail(self, **more: Any) -> dict[str, Any]:
        return {**more, "calls": self.calls}


def worst_case(provider: object, request: ModelRequest) -> tuple[int, float]:
    """The most tokens and USD one call of ``request`` may cost: an upper bound of its input (a token is
    at least one byte of the text sent, plus per-message overhead) plus ``max_tokens``, at the provider's
    price (0 when it has none)."""
    sent = (request.system or "") + request.prompt + (json.dumps(request.output_schema)
                                                      if request.output_schema is not None else "")
    tokens_in = len(sent.encode("utf-8")) + 32
    tokens_out = request.max_tokens or DEFAULT_MAX_TOKENS
    price = getattr(provider, "price", None)
    cost = float(price.cost(tokens_in, tokens_out)) if price is not None else 0.0
    return tokens_in + tokens_out, cost


def _ask(x: Execution, model: str, provider: Provider, request: ModelRequest, usage: _Usage,
         box: dict[str, Any]) -> Succeeded | Failed | limits.Parked:
    worst_t, worst_c = worst_case(provider, request)
    refused = budgets.reserve(x, usage.tokens + worst_t, usage.cost_usd + worst_c)
    if refused is not None:
        return _with_usage(refused, usage)
    grant = limits.take(x, model, provider, worst_t)  # the model's rate limit, shared by every worker
    if isinstance(grant, (Failed, limits.Parked)):
        return _with_usage(grant, usage) if isinstance(grant, Failed) else grant

    def complete(ctx: StepContext) -> ModelResult:
        box["called"] = True
        try:
            return provider.complete(request)
        except StepError as exc:
            box["error"] = exc
            raise

    box.pop("called", None)
    outcome = through_model(x, model, provider, lambda: call(x, complete, None))
    if isinstance(outcome, Succeeded):
        result = outcome.output
        usage.call(x, model, request, answered=getattr(result, "model", "") or None,
                   tokens=getattr(result, "total_tokens", 0), cost=getattr(result, "cost_usd", 0.0))
        limits.settle(x, grant, getattr(result, "total_tokens", 0))
    else:
        exc = box.get("error")
        usage.call(x, model, request, answered=None, tokens=getattr(exc, "tokens", 0),
                   cost=getattr(exc, "cost_usd", 0.0), error=outcome.error_class)
        # (the model's circuit breaker refused it when it was not called: no request made, none counted)
        limits.ended(x, grant, made=bool(box.get("called")), used_tokens=getattr(exc, "tokens", 0))
    return outcome


def execute(x: Execution) -> Outcome:
    from sealflow.providers.base import ModelRequest

    ai = section(x, x.step.ai, "ai")
    prompt = expressions.to_text(x.render(ai.prompt_template or ""))
    system = expressions.to_text(x.render(ai.system)) if ai.system else None
    usage = _Usage()
    usage.prompt = prompt
    failure: Failed | None = None
    parked: list[limits.Parked] = []  # models over their rate limit: the next one is tried
    for model in (ai.model, *ai.fallback):
        try:
            provider = x.services.provider_for(model)
        except StepError as exc:
            failure = Failed(exc.error_class, exc.message, exc.retry_after)
            if exc.error_class in FALLS_BACK:
                continue
            return failure
        request = ModelRequest(model=model, prompt=prompt, system=system, output_schema=ai.output_schema,
                               max_tokens=max_tokens_for(ai, provider), temperature=ai.temperature,
                               idempotency_key=f"{x.run.id}:{x.step_id}:{x.attempt.attempt}", deadline=x.deadline())
        box: dict[str, Any] = {}
        outcome = _ask(x, model, provider, request, usage, box)
        if isinstance(outcome, limits.Parked):
            parked.append(outcome)
            continue
        if isinstance(outcome, Failed):
            failure = outcome
            if outcome.error_class in FALLS_BACK and not outcome.timed_out:  # (timed out: no time is left)
                continue
            refused = _provider_refusal(outcome, box)
            if refused is None:
                return _with_usage(outcome, usage)
            return _repair(x, model, provider, request, usage, refused, None)
        result = outcome.output
        answered = getattr(result, "model", "") or model
        refused = _check(x, result.output)
        if refused is None:
            return Succeeded(result.output, detail=usage.detail(model=answered), **usage.as_kw())
        return _repair(x, model, provider, request, usage, refused, answered)
    if parked:  # every model it may use is over its rate limit: wait durably for the first to free
        return limits.waiting(x, parked, tokens=usage.tokens, cost_usd=usage.cost_usd)
    return _with_usage(failure or Failed("configuration", "the ai step names no model"), usage)


def _with_usage(failed: Failed, usage: _Usage) -> Failed:
    failed.tokens, failed.cost_usd = usage.tokens, usage.cost_usd
    failed.data = usage.as_kw()["data"]
    if usage.calls:
        failed.detail = usage.detail(**(failed.detail or {}))
    return failed


def _provider_refusal(outcome: Failed, box: dict[str, Any]) -> tuple[str, str] | None:
    """A provider's ``invalid_output`` worth repairing (not JSON), as (layer, error); None otherwise."""
    if outcome.error_class != "invalid_output" or "error" not in box:
        return None
    if "cut off" in outcome.message:  # truncated at the token limit: asking again the same way won't fit
        return None
    return "schema", outcome.message


def _check(x: Execution, output: Any) -> tuple[str, str] | None:
    """The first check ``output`` fails, as (layer, error); None when it passes them all."""
    schema = section(x, x.step.ai, "ai").output_schema
    problem = schema_failure(x, schema, output)
    if problem is not None:
        return _schema_layer(x, output), problem
    failed = validation_failure(x, output)
    if failed is not None:
        return "business_rule", failed.message
    return None


def _schema_layer(x: Execution, output: Any) -> str:
    import jsonschema

    validator = x.services.validators.get((x.plan.digest, x.step.id, "schema"))
    errors = list(validator.iter_errors(output)) if validator is not None else []
    best = jsonschema.exceptions.best_match(errors) if errors else None
    return "types" if best is not None and best.validator == "type" else "schema"


def repair_prompt(prompt: str, layer: str, error: str) -> str:
    """The repair request's prompt: the original one, then what was wrong with the answer."""
    return (f"{prompt}\n\nYour previous answer was refused by the {layer.replace('_', ' ')} check:\n"
            f"- {error}\nAnswer again, correcting this; answer only with the corrected output.")


def _repair(x: Execution, model: str, provider: Provider, request: ModelRequest, usage: _Usage,
            refused: tuple[str, str], answered: str | None) -> Outcome:
    from dataclasses import replace

    layer, error = refused
    again = replace(request, prompt=repair_prompt(request.prompt, layer, error),
                    idempotency_key=f"{request.idempotency_key}:repair" if request.idempotency_key else None)
    record: dict[str, Any] = {"layer": layer, "error": error}
    box: dict[str, Any] = {}
    outcome = _ask(x, model, provider, again, usage, box)
    if isinstance(outcome, limits.Parked):  # the repair call must wait: the attempt starts over when it may
        return limits.waiting(x, [outcome], tokens=usage.tokens, cost_usd=usage.cost_usd)
    if isinstance(outcome, Failed) and outcome.error_class == "budget_exceeded":
        outcome.detail = {"model": answered or model, "repair": {**record, "passed": False}}
        return _with_usage(outcome, usage)
    if isinstance(outcome, Failed):
        second = _provider_refusal(outcome, box)
        record.update(passed=False, second_layer=second[0] if second else None, second_error=outcome.message)
        return Failed("invalid_output" if second else outcome.error_class,
                      f"{outcome.message} (after one repair attempt; first: {error})", outcome.retry_after,
                      detail=usage.detail(model=answered or model, repair=record), **usage.as_kw())
    result = outcome.output
    answered = getattr(result, "model", "") or model
    still = _check(x, result.output)
    if still is None:
        record["passed"] = True
        return Succeeded(result.output, detail=usage.detail(model=answered, repair=record), **usage.as_kw())
    record.update(passed=False, second_layer=still[0], second_error=still[1])
    return Failed("invalid_output", f"{still[1]} (after one repair attempt)",
                  detail=usage.detail(model=answered, repair=record), **usage.as_kw())
