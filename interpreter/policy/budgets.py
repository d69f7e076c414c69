"""Budgets: checked before each attempt, charged with each result.

Two scopes, one rule each way:

* **before** an attempt (:func:`before`): would it exceed a budget? The run's
  ``max_runtime`` (its deadline passed: the run ends ``timed_out``), its
  ``max_steps`` (executed attempts, retries included), and for steps that call
  a model (``ai``, ``agent``) its ``max_tokens``, ``max_cost_usd`` and
  ``max_tool_calls`` with the attempt's *worst case* (``ai.max_tokens``;
  ``agent.max_tokens * agent.max_steps`` and ``agent.max_tool_calls``) when
  the step declares it, plus the step's own budget and the tenant's daily
  quota. A refused attempt does not run and does not count as a step.
* **during** an ``ai`` or ``agent`` attempt (:func:`reserve`): before each model call the usage so far
  plus the call's worst case (its input's upper bound plus ``max_tokens``, or the default cap, at the
  model's price) is reserved against the step's budget and the tenant's daily quota; the commit settles
  the reservation with the real figure, so concurrent runs cannot overshoot a quota.
* **after** an attempt (:func:`after`): the usage it reports (tokens, cost,
  tool calls) is charged to the run in the step's commit (even when the
  attempt failed), and a result that went over a budget becomes
  ``budget_exceeded``; a failure once the run's deadline has passed (the attempt
  stopped at it, or failing by itself after it) ends the run ``timed_out``
  (:func:`past_deadline`), never retried.

``budget_exceeded`` is never retried. A *run* budget (and the tenant quota)
ends the run at once: no ``on_error`` route is taken, so a loop cannot spin on
refused attempts. A *step* budget fails the step only (``on_error`` may route
it). Every check is on values already loaded with the claim, except the
tenant's daily usage, read only for model steps of a tenant with a quota.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from sealflow.core.clock import DAY_S, day_of, quota_reset_in  # noqa: F401 - re-exported
from sealflow.core.kinds import traits_of
from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.dsl.durations import format_ms

if TYPE_CHECKING:
    from sealflow.dsl.plan import BudgetPlan, Plan, PlanStep
    from sealflow.execution.context import Execution
    from sealflow.store.base import RunRecord

def _run_over(message: str, *, retry_after: float | None = None) -> Failed:
    return Failed("budget_exceeded", message, ends_run="failed", retry_after=retry_after)


def worst_case(step: PlanStep) -> tuple[int | None, int | None]:
    """The most tokens and tool calls one attempt of ``step`` may use (None: unknown).

    An ``ai`` step's is its ``max_tokens``. An ``agent`` step's is left unknown: its loop checks
    every turn and every proposed tool call against what is left (:mod:`sealflow.steps.agent.loop`),
    so refusing it up front for ``max_steps`` worst-case turns would refuse agents that fit."""
    if step.kind == "ai" and step.ai is not None:
        return step.ai.max_tokens, 0
    if step.kind == "agent":
        return None, None
    return 0, 0


def before(x: Execution) -> Failed | None:
    """Why attempt ``x`` must not run because of a budget (None: it may run)."""
    run = x.run
    if run.deadline is not None and x.now >= run.deadline:
        return Failed("timeout", f"the run passed {_max_runtime(x)}; step {x.step.id!r} did not start",
                      timed_out=True, ends_run="timed_out")
    if x.resumed or x.gate:
        return None
    budget = x.plan.budget
    if budget.max_steps is not None and run.steps_executed >= budget.max_steps:
        return _run_over(f"the run has executed {run.steps_executed} step attempts, its budget.max_steps; raise it "
                         "or look for a loop")
    step = x.step
    if not traits_of(step.kind).calls_model:
        return None
    tokens, calls = worst_case(step)
    for name, cap, spent, more in (("max_tokens", budget.max_tokens, run.tokens, tokens),
                                   ("max_tool_calls", budget.max_tool_calls, run.tool_calls, calls)):
        if cap is None:
            continue
        if spent >= cap or (more is not None and spent + more > cap):
            worst = "" if not more else f" and step {step.id!r} may use up to {more} more"
            return _run_over(f"the run has used {spent} of its budget.{name} of {cap}{worst}; raise "
                             f"budget.{name} or lower the step's limit")
    if budget.max_cost_usd is not None and run.cost_usd >= budget.max_cost_usd:
        return _run_over(f"the run has spent ${run.cost_usd:.4f} of its budget.max_cost_usd of "
                         f"${budget.max_cost_usd:.4f}; raise budget.max_cost_usd")
    own = step.budget
    for name, cap, more in (("max_tokens", own.max_tokens, tokens), ("max_tool_calls", own.max_tool_calls, calls)):
        if cap is not None and more is not None and more > cap:
            return Failed("budget_exceeded", f"step {step.id!r} may use up to {more} ({name.split('_', 1)[1]}), over "
                                             f"its budget.{name} of {cap}; lower the step's limit or raise its budget")
    return _tenant_quota(x, tokens)


#: run id -> whether it is a called workflow's run (the parents of fan-out items seen here; bounded)
_CALLED: dict[str, bool] = {}


def callers(x: Execution, plan_of: Callable[[str], Plan], depth: int = 16) -> Failed | None:
    """Why attempt ``x`` of a called workflow's run must not run because of a budget of a run that called it (its
    caller, the caller's caller, ...): their counters hold the child's usage (the store adds it up the chain), so
    a child can spend no more than its callers may. None: every caller's budget allows it (or ``x``'s run was not
    called). A fan-out child (an item of a map inside a called workflow) is checked from its parent up."""
    run, store = x.run, x.services.store
    if run.parent_run_id is not None and not run.called:  # an item: its parent's budget is its own already
        if _CALLED.get(run.parent_run_id) is False:  # (whether a run was called never changes)
            return None
        run = store.get_run(run.parent_run_id)
        if len(_CALLED) >= 4096:
            _CALLED.clear()
        _CALLED[run.id] = run.called
    while run.called and run.parent_run_id is not None and depth > 0:
        depth -= 1
        parent = store.get_run(run.parent_run_id)
        from sealflow.execution.context import Execution

        view = Execution(x.services, plan_of(parent.plan_digest), x.step, parent, x.attempt, None, x.now,
                         resumed=x.resumed, gate=x.gate)
        refused = before(view)
        if refused is not None:
            return dataclasses.replace(refused, message=f"run {parent.id} ({parent.workflow} "
                                                        f"v{parent.workflow_version}), which called this one: "
                                                        f"{refused.message}")
        run = parent
    return None


def _tenant_quota(x: Execution, worst_tokens: int | None) -> Failed | None:
    config = getattr(x.services, "config", None)
    if config is None:
        return None
    limits = config.limits(x.run.tenant)
    if not limits.has_quota:
        return None
    store = x.services.store
    tokens, cost = store.tenant_usage(x.run.tenant, day_of(x.now))
    held = x.services.capabilities.usage_reservations
    if held is not None:  # other attempts' reservations count as used
        more_t, more_c = held.reserved_usage(x.run.tenant, day_of(x.now), x.now)
        tokens, cost = tokens + more_t, cost + more_c
    wait = quota_reset_in(x.now)
    if limits.daily_tokens is not None and (tokens >= limits.daily_tokens or
                                            tokens + (worst_tokens or 0) > limits.daily_tokens):
        return _run_over(f"tenant {x.run.tenant!r} has used {tokens} of its daily_tokens quota of "
                         f"{limits.daily_tokens}; the quota resets in {wait:.0f}s (UTC midnight)", retry_after=wait)
    if limits.daily_cost_usd is not None and cost >= limits.daily_cost_usd:
        return _run_over(f"tenant {x.run.tenant!r} has spent ${cost:.4f} of its daily_cost_usd quota of "
                         f"${limits.daily_cost_usd:.4f}; the quota resets in {wait:.0f}s (UTC midnight)",
                         retry_after=wait)
    return None


def _run_spent(run: RunRecord, budget: BudgetPlan, tokens: int, cost: float, calls: int) -> bool:
    return ((budget.max_tokens is not None and run.tokens + tokens >= budget.max_tokens)
            or (budget.max_cost_usd is not None and run.cost_usd + cost >= budget.max_cost_usd)
            or (budget.max_tool_calls is not None and run.tool_calls + calls >= budget.max_tool_calls))


def after(x: Execution, outcome: Outcome) -> Outcome:
    """``outcome``, or ``budget_exceeded`` (keeping its usage) when what it used went over a budget, or a
    failure that ends the run ``timed_out`` when the run's deadline passed while the attempt ran
    (:func:`past_deadline`)."""
    return past_deadline(x, _charged(x, outcome))


def _max_runtime(x: Execution) -> str:
    limit = x.plan.budget.max_runtime_ms
    return f"its budget.max_runtime of {format_ms(limit)}" if limit else "its deadline"


def past_deadline(x: Execution, outcome: Outcome) -> Outcome:
    """A failure of an attempt the run's deadline overtook ends the run ``timed_out`` (dead-lettered), with or
    without a retry class and whatever ``on_error`` routes exist: nothing may start past the deadline anyway
    (:func:`before`), so a retry or a route would only be refused. Two ways: the attempt was *stopped* at the
    deadline (its timeout was cut there: :meth:`Execution.deadline`; the step is ``timed_out`` and the run is
    not compensated, as when the sweeper finds it running: :func:`stopped_at_deadline`), or it failed by itself
    once the deadline had passed (the step's own error is kept in the message). A success stands."""
    run = x.run
    if not isinstance(outcome, Failed) or outcome.ends_run is not None or run.deadline is None:
        return outcome
    stopped = outcome.timed_out and x.deadline() == run.deadline
    if not stopped and x.services.clock.now() < run.deadline:
        return outcome
    if stopped:
        message = f"the run passed {_max_runtime(x)} while step {x.step.id!r} ran; the attempt was stopped there"
    else:
        message = (f"the run passed {_max_runtime(x)} while step {x.step.id!r} ran; it then failed with "
                   f"{outcome.error_class}: {outcome.message}")
    return Failed("timeout", message, timed_out=stopped, ends_run="timed_out", tokens=outcome.tokens,
                  cost_usd=outcome.cost_usd, tool_calls=outcome.tool_calls, ledger_key=outcome.ledger_key,
                  ledger_output=outcome.ledger_output, data=outcome.data, detail=outcome.detail)


def stopped_at_deadline(x: Execution, step_state: str | None, run_state: str | None) -> bool:
    """The commit of attempt ``x`` ends the run ``timed_out`` because the run's deadline stopped the attempt while
    it ran (:func:`past_deadline`; a refusal by :func:`before` is made at or after the deadline, not before)."""
    return (run_state == "timed_out" and step_state == "timed_out" and x.run.deadline is not None
            and x.now < x.run.deadline)


def _charged(x: Execution, outcome: Outcome) -> Outcome:
    if not isinstance(outcome, (Succeeded, Failed)):
        return outcome
    tokens, cost, calls = outcome.tokens, outcome.cost_usd, outcome.tool_calls
    if not (tokens or cost or calls):
        return outcome
    run, budget, own = x.run, x.plan.budget, x.step.budget
    if isinstance(outcome, Failed) and outcome.error_class == "budget_exceeded":
        # refused inside the step (an agent's loop): a spent *run* budget still ends the run
        if outcome.ends_run is None and _run_spent(run, budget, tokens, cost, calls):
            outcome.ends_run = "failed"
        return outcome
    message, ends = None, None
    cap: float | None  # a count of tokens or tool calls, or a cost in USD
    used: float
    for name, cap, spent, used in (("max_tokens", budget.max_tokens, run.tokens, tokens),
                                   ("max_tool_calls", budget.max_tool_calls, run.tool_calls, calls)):
        if cap is not None and used and spent + used > cap:
            message, ends = (f"step {x.step.id!r} used {used} {name.split('_', 1)[1]}, over the run's budget.{name} "
                             f"of {cap} ({spent} already used)"), "failed"
            break
    if message is None and budget.max_cost_usd is not None and cost and run.cost_usd + cost > budget.max_cost_usd:
        message, ends = (f"step {x.step.id!r} cost ${cost:.4f}, over the run's budget.max_cost_usd of "
                         f"${budget.max_cost_usd:.4f} (${run.cost_usd:.4f} already spent)"), "failed"
    if message is None:
        for name, cap, used in (("max_tokens", own.max_tokens, tokens), ("max_tool_calls", own.max_tool_calls, calls),
                                ("max_cost_usd", own.max_cost_usd, cost)):
            if cap is not None and used > cap:
                message = f"step {x.step.id!r} used {used} ({name}), over its budget.{name} of {cap}"
                break
    if message is None:
        return outcome
    failed = Failed("budget_exceeded", message, ends_run=ends, tokens=tokens, cost_usd=cost, tool_calls=calls)
    if isinstance(outcome, Succeeded):
        # the effect happened: record it so a later attempt under the same key does not repeat it
        failed.ledger_key, failed.ledger_output = outcome.ledger_key, outcome.output
    else:
        failed.ledger_key, failed.ledger_output = outcome.ledger_key, outcome.ledger_output
    return failed


def reservation_key(x: Execution) -> str:
    return f"{x.run.id}:{x.step_id}:{x.attempt.attempt}"


def reserve(x: Execution, tokens: int, cost_usd: float) -> Failed | None:
    """Reserve what attempt ``x`` may use at most (``tokens``/``cost_usd``: what it used so far plus the
    worst case of its next model call) against the step's budget and the tenant's daily quota; a refusal
    (``budget_exceeded``; a quota ends the run) means the call must not be made.

    The tenant's reservation is one row per attempt in the store, taken in one transaction with the
    quota check (:mod:`sealflow.store.sql.reservations`), so concurrent calls cannot pass
    the quota together; the step's commit settles it with the real figure."""
    own = x.step.budget
    for name, cap, more in (("max_tokens", own.max_tokens, tokens), ("max_cost_usd", own.max_cost_usd, cost_usd)):
        if cap is not None and more > cap:
            shown = f"${more:.4f}" if name == "max_cost_usd" else f"{more} tokens"
            return Failed("budget_exceeded", f"step {x.step.id!r} may use up to {shown} with its next model call, "
                                             f"over its budget.{name} of {cap}; lower max_tokens or raise the budget")
    config = getattr(x.services, "config", None)
    limits = config.limits(x.run.tenant) if config is not None else None
    if limits is None or not limits.has_quota:
        return None
    reservations = x.services.capabilities.usage_reservations
    if reservations is None:  # a store without reservations: the quota counts committed usage only
        return None
    expires = x.deadline() + 60.0  # a reservation whose attempt died frees itself
    taken = reservations.reserve_usage(reservation_key(x), x.run.id, x.run.tenant, day_of(x.now), int(tokens),
                                       float(cost_usd), x.now, expires, max_tokens=limits.daily_tokens,
                                       max_cost_usd=limits.daily_cost_usd)
    if taken is None:
        return None
    wait = quota_reset_in(x.now)
    return _run_over(f"tenant {x.run.tenant!r} has used or reserved {taken[0]} tokens (${taken[1]:.4f}) of its daily "
                     f"quota (daily_tokens {limits.daily_tokens}, daily_cost_usd {limits.daily_cost_usd}); step "
                     f"{x.step.id!r} may use up to {tokens} tokens (${cost_usd:.4f}), so the model was not called; "
                     f"the quota resets in {wait:.0f}s (UTC midnight)", retry_after=wait)
