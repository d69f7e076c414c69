"""Decisions: an attempt's :mod:`outcome <sealflow.core.outcomes>` becomes one atomic commit.

Pure given its inputs (the plan, the run as read, the attempt, the outcome,
the time): no I/O here, so the engine can decide again after an optimistic
concurrency conflict, and tests can check decisions without a store.

* success: record the output (and the ledger entry); open the approval gate
  when ``requires_approval_if`` is true (an error evaluating it opens the gate
  too: fail closed); else go to ``next`` (``end`` completes the run and
  renders the plan's ``output``);
* failure: retry with backoff when the policy allows (a ``retry_wait``
  attempt and a ``backoff`` timer), else take a matching ``on_error`` route,
  else fail the run into the dead-letter list with its fingerprint;
* a run being cancelled keeps the attempt's result and becomes ``cancelled``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any, TypedDict

from sealflow.core import leases, retry
from sealflow.core.fingerprints import fingerprint
from sealflow.core.ids import gate_id
from sealflow.core.jsonc import NotUnicode, dumps, over_payload_limit
from sealflow.core.kinds import traits_of
from sealflow.core.outcomes import EndRun, Failed, Outcome, Skipped, Succeeded, Waiting
from sealflow.dsl.errors import DslError
from sealflow.dsl.expressions import truthy
from sealflow.dsl.plan import END, ApprovalPlan, PlanStep, RetryPolicy
from sealflow.execution.context import Execution, payload_limit
from sealflow.policy.approvals import opening
from sealflow.store.base import (
    AuditEvent,
    Commit,
    DeadLetterSpec,
    LedgerEntry,
    NextAttempt,
    RunChange,
    Spawn,
    StepChange,
)

#: ``amend(step, next, inline, expected_rev)``: more fields of the commit (the engine's: :meth:`Engine._commit`)
Amend = Callable[[StepChange | None, NextAttempt | None, bool, int], dict[str, Any]]
#: the expression context of a decision (``steps``, ``input``, ``run``, ...), built when it is needed
Context = Callable[[], dict[str, Any]]


def lease_ms(step: PlanStep) -> int:
    """The lease of an attempt of ``step`` (:mod:`sealflow.core.leases`)."""
    return leases.lease_ms(step.timeout_ms)


def skip_target(step: PlanStep) -> str:
    """Where a skipped step (``when`` false) goes: its ``skip`` edge, else ``next``, else the end."""
    for edge in step.edges:
        if edge.kind == "skip":
            return edge.target
    return step.next or "end"


def schedule_retry(policy: RetryPolicy, step_id: str, try_no: int, failed: Failed, *, rng: random.Random | None,
                   now: float, lease: int, actor: str,
                   data: dict[str, Any] | None = None) -> tuple[NextAttempt, AuditEvent] | None:
    """The next try of a failed attempt and its ``retry_scheduled`` event, when ``policy`` (a step's or a
    compensation's ``retry``) allows one; None when it does not. The one retry scheduler."""
    if failed.no_retry or failed.ends_run or not retry.should_retry(policy, failed.error_class, try_no):
        return None
    delay = retry.delay_seconds(policy, try_no, failed.retry_after, rng)
    nxt = NextAttempt(step_id, try_no + 1, "retry_wait" if delay > 0 else "scheduled", now + delay, lease,
                      "backoff" if delay > 0 else None, data)
    event = AuditEvent("retry_scheduled", step_id, actor,
                       detail={"error_class": failed.error_class, "delay_s": round(delay, 6),
                               "next_try": try_no + 1, "max_attempts": policy.max_attempts})
    return nxt, event


def as_json(x: Execution, outcome: Outcome) -> tuple[Outcome, str | None]:
    """The outcome's output as JSON text; a value that is not JSON turns the outcome into ``internal`` (a bug
    in the action), text that is not Unicode (an unpaired surrogate: a model's or a service's answer may
    hold one) or an output over ``payloads.max_bytes`` into ``invalid_output``: the step fails, and says
    where, rather than its commit."""
    if not isinstance(outcome, (Succeeded, EndRun)):
        return outcome, None
    try:
        text = dumps(outcome.output)
    except NotUnicode as exc:
        return Failed("invalid_output", f"step {x.step.id!r} produced text that is not valid Unicode at "
                                        f"output{exc.where[1:]} (an unpaired surrogate); nothing of it was "
                                        "stored"), None
    except (TypeError, ValueError) as exc:
        return Failed("internal", f"step {x.step.id!r} produced a value that is not JSON ({exc}); return dicts, "
                                  "lists, strings, numbers, booleans or null"), None
    over = _over_limit(x, text)
    if over is not None:
        return Failed("invalid_output", f"step {x.step.id!r} produced an output of {over}; nothing of it was "
                                        f"stored ({_CLAIM_CHECK})"), None
    return outcome, text


def _over_limit(x: Execution, text: str) -> str | None:
    """What is wrong with ``text`` (stored JSON) when it weighs more than ``payloads.max_bytes``, else None."""
    return over_payload_limit(text, payload_limit(x.services.config))


_CLAIM_CHECK = "keep large documents outside the run, e.g. in an object store, and pass their key"


class _Counters(TypedDict, total=False):
    """What a commit adds to the run's counters (:class:`RunChange`'s ``add_*`` fields)."""

    add_steps: int
    add_tokens: int
    add_cost_usd: float
    add_tool_calls: int


class _Decision:
    def __init__(self, x: Execution, actor: str, counts_step: bool):
        self.x = x
        self.actor = actor
        self.step: StepChange | None = None
        self.run_state: str | None = None
        self.output_json: str | None = None
        self.error: tuple[str | None, str | None] = (None, None)
        self.next: NextAttempt | None = None
        self.ledger: LedgerEntry | None = None
        self.dead: DeadLetterSpec | None = None
        self.audit: list[AuditEvent] = []
        self.counters: _Counters = {"add_steps": 1 if counts_step else 0}
        self.spawn: Spawn | None = None

    def change(self, state: str, **kw: Any) -> None:
        a = self.x.attempt
        self.step = StepChange(a.step_id, a.attempt, a.token, state, **kw)

    def usage(self, outcome: Succeeded | Failed | Waiting) -> None:
        self.counters.update({"add_tokens": outcome.tokens, "add_cost_usd": outcome.cost_usd,
                              "add_tool_calls": outcome.tool_calls})

    def record(self, key: str | None, output_json: str | None) -> None:
        if key is not None and output_json is not None:
            x = self.x
            self.ledger = LedgerEntry(x.run.tenant, key, x.run.id, x.step_id, output_json)

    def go(self, target: str | None, context: Context) -> None:
        x = self.x
        if target is None or target == END:
            try:
                out = x.plan.output
                if out is None and x.run.parent_run_id is not None:  # a fan-out child: its last step's output
                    rendered = context()["steps"].get(x.step.id, {}).get("output")
                else:
                    rendered = None if out is None else _render(x, out, context())
                text = dumps(rendered)
            except (DslError, TypeError, ValueError) as exc:
                self.fail_run("invalid_request", f"the workflow's output could not be rendered: {exc}")
                return
            over = _over_limit(x, text)
            if over is not None:
                self.fail_run("invalid_output", f"the workflow's output is {over} ({_CLAIM_CHECK})")
                return
            self.run_state, self.output_json = "completed", text
            return
        nxt = x.plan.step(target)
        self.next = NextAttempt(target, 1, "scheduled", x.now, lease_ms(nxt))
        self.run_state = "running"

    def fail_run(self, error_class: str, message: str, state: str = "failed") -> None:
        x = self.x
        self.run_state = state
        self.error = (error_class, message)
        if x.run.parent_run_id is not None:  # a fan-out child's failure is its parent step's to handle
            return
        # a quarantined run's letter says why in its own words (a poison step: "poison: ...")
        reason = message if state == "quarantined" else f"step {x.step_id!r} failed with {error_class}: {message}"
        self.dead = DeadLetterSpec(x.step_id, reason, error_class, fingerprint(x.step_id, error_class, message))

    def commit(self, inline: bool, amend: Amend | None = None) -> Commit:
        x = self.x
        if x.run.state == "cancelling":
            # the run was cancelled while this attempt ran: keep the result, stop the run
            if self.step is not None and self.step.state == "waiting":
                self.step = dataclasses.replace(self.step, state="cancelled", timer_kind=None)
            self.run_state, self.next, self.dead, self.output_json = "cancelled", None, None, None
            self.error = (None, None)
        change = RunChange(state=self.run_state, output_json=self.output_json, error_class=self.error[0],
                           error_message=self.error[1], **self.counters)
        extra: dict[str, Any] = {} if amend is None else amend(self.step, self.next, inline, x.run.rev)
        return Commit(run_id=x.run.id, expected_rev=x.run.rev, step=self.step, run=change, next=self.next,
                      ledger=self.ledger, dead_letter=self.dead, audit=tuple(self.audit), actor=self.actor,
                      dispatch_inline=inline, spawn=None if x.run.state == "cancelling" else self.spawn,
                      close_fanout=traits_of(x.step.kind).fans_out and not x.gate, **extra)


def _render(x: Execution, value: Any, context: dict[str, Any]) -> Any:
    from sealflow.dsl.expressions import templates

    return templates.render_value(value, context, clock=x.services.clock.now)


def decide(x: Execution, outcome: Outcome, *, actor: str, counts_step: bool = True, inline: bool = True,
           amend: Amend | None = None) -> Commit:
    """The commit that applies ``outcome`` of attempt ``x``; ``amend(step, next, inline, expected_rev)`` gives
    more of its fields (the engine's: which slots it holds, whether it carries on, its view of the run)."""
    outcome, out_json = as_json(x, outcome)
    d = _Decision(x, actor, counts_step)
    step = x.step
    if x.attempt.state == "waiting" and _AGENT_RESUME in x.attempt.data and isinstance(outcome, (Succeeded, Failed)):
        _tool_call_decided(d, x, outcome)
    elif isinstance(outcome, Succeeded):
        d.usage(outcome)
        d.change("succeeded", output_json=out_json, data=outcome.data)
        d.record(outcome.ledger_key, out_json)
        if outcome.replayed:
            d.audit.append(AuditEvent("idempotent_replay", x.step_id, actor, detail=outcome.detail))
        elif outcome.detail:
            d.audit.append(AuditEvent("step.detail", x.step_id, actor, detail=outcome.detail))
        def context() -> dict[str, Any]:
            return _with_result(x, "succeeded", outcome.output)

        target = (x.attempt.data.get("then") or step.next) if x.gate else (outcome.next or step.next)
        condition = step.requires_approval_if
        if not x.gate and step.gate is not None and condition and _gate_needed(x, condition, outcome.output):
            _open_gate(d, x, step.gate, context(), target)
        else:
            d.go(target, context)
    elif isinstance(outcome, Skipped):
        d.change("skipped")
        d.go(outcome.target, lambda: _with_result(x, "skipped", None))
    elif isinstance(outcome, Waiting):
        fresh = x.attempt.state == "running"
        d.change("waiting", due_at=outcome.due_at, data=outcome.data,
                 timer_kind=outcome.timer_kind if fresh else None)
        d.run_state = "waiting"
        if outcome.tokens or outcome.cost_usd or outcome.tool_calls:  # used before a rate limit stopped it
            d.usage(outcome)
        if outcome.event:
            d.audit.append(AuditEvent(outcome.event, x.step_id, actor, detail=outcome.detail))
        d.spawn = outcome.spawn
    elif isinstance(outcome, EndRun):
        if outcome.state == "completed":
            d.change("succeeded", output_json=out_json)
            d.run_state, d.output_json = "completed", out_json
        else:
            d.change("failed", error_class=outcome.error_class, error_message=outcome.message)
            d.fail_run(outcome.error_class or "internal", outcome.message or "")
    else:
        _failed(d, x, outcome)
    return d.commit(inline, amend)


def _failed(d: _Decision, x: Execution, f: Failed) -> None:
    d.usage(f)
    d.change("timed_out" if f.timed_out else "failed", error_class=f.error_class, error_message=f.message,
             error_trace=f.trace, data=f.data)
    if f.detail:
        d.audit.append(AuditEvent("step.detail", x.step_id, d.actor, detail=f.detail))
    if f.ledger_key is not None:
        try:
            text = dumps(f.ledger_output)
        except (TypeError, ValueError):
            text = None  # not JSON: nothing to replay; the retry reports the same problem
        if text is not None and _over_limit(x, text) is None:  # too large to keep: the retry calls again, same key
            d.record(f.ledger_key, text)
    if f.ends_run is not None:  # a run budget or quota, a poison step: the run ends here, whatever routes exist
        d.fail_run(f.error_class, f.message, f.ends_run)
        return
    if f.rerun:  # a lost attempt (engine/poison): the same try again, max_attempts not consumed
        d.next = NextAttempt(x.step_id, x.attempt.try_no, "scheduled", x.now, lease_ms(x.step), None, f.data)
        d.run_state = "running"
        d.audit.append(AuditEvent("attempt_lost", x.step_id, d.actor,
                                  detail={"attempt": x.attempt.attempt, "try": x.attempt.try_no,
                                          "lost": (f.data or {}).get("lost_before"), "message": f.message}))
        return
    def context() -> dict[str, Any]:
        return _with_result(x, "timed_out" if f.timed_out else "failed", None)

    if f.route is not None:
        d.go(f.route, context)
        return
    step, attempt = x.step, x.attempt
    fixed = x.gate or traits_of(step.kind).fans_out  # a gate, or a fan-out step (its children retried their steps)
    again = None if fixed else schedule_retry(step.retry, x.step_id, attempt.try_no, f, rng=x.services.rng,
                                          now=x.now, lease=lease_ms(step), actor=d.actor)
    if again is not None:
        d.next, event = again
        d.run_state = "running"
        d.audit.append(event)
        return
    for route in step.on_error:
        if f.error_class in route.errors:
            d.audit.append(AuditEvent("on_error", x.step_id, d.actor,
                                      detail={"error_class": f.error_class, "next": route.next}))
            d.go(route.next, context)
            return
    d.fail_run(f.error_class, f.message)


def _with_result(x: Execution, status: str, output: Any) -> dict[str, Any]:
    if x.gate:
        return x.context
    steps = dict(x.context["steps"])
    steps[x.step.id] = {"status": status, "output": output}
    context = dict(x.context)
    context["steps"] = steps
    return context


_AGENT_RESUME = "agent_resume"  # steps.agent.approval.RESUME


def _tool_call_decided(d: _Decision, x: Execution, outcome: Succeeded | Failed) -> None:
    """A person decided the tool call an agent step waits on (:mod:`sealflow.steps.agent.approval`):
    the waiting attempt ends (``succeeded``: approved; ``failed``: rejected) and a new attempt of the same try
    continues the conversation, carried over in its data with the decision."""
    data = dict(outcome.data if isinstance(outcome, Succeeded) and outcome.data else x.attempt.data)
    state = data.pop(_AGENT_RESUME)
    decision = {"approved": isinstance(outcome, Succeeded), "show_hash": data.get("show_hash"),
                "by": [a.get("actor") for a in data.get("approvals", ())]}
    if isinstance(outcome, Succeeded):
        d.change("succeeded", data=data)
    else:
        decision["reason"] = outcome.message
        d.change("failed", error_class=outcome.error_class, error_message=outcome.message, data=data)
    d.next = NextAttempt(x.step_id, x.attempt.try_no, "scheduled", x.now, lease_ms(x.step), None,
                         {_AGENT_RESUME: {**state, "decision": decision}})
    d.run_state = "running"


def _gate_needed(x: Execution, condition: str, output: Any) -> bool:
    try:
        return truthy(x.evaluate(condition, output=output, with_output=True))
    except DslError:
        return True  # cannot tell: fail closed, a human decides


def _open_gate(d: _Decision, x: Execution, gate: ApprovalPlan, context: dict[str, Any], then: str | None) -> None:
    gx = Execution(x.services, x.plan, x.step, x.run, x.attempt, context, x.now, gate=True)
    data = opening(gx, gate, x.now)
    data["then"] = then  # where control goes once approved
    d.next = NextAttempt(gate_id(x.step.id), 1, "waiting", x.now + gate.timeout_ms / 1000.0, lease_ms(x.step),
                         "approval_timeout", data)
    d.run_state = "waiting"
    d.audit.append(AuditEvent("approval_required", x.step_id, d.actor,
                              detail={"condition": x.step.requires_approval_if,
                                      "approvers": list(gate.approvers)}))
