"""Compensation (saga): undo the completed steps of a run that failed for good or was cancelled.

When a run would end ``failed`` (no retry left, no ``on_error`` route: what
would land in the dead-letter list) or ``cancelled``, and some of its
*completed* steps (an attempt ``succeeded``) declare ``compensate:``, the run
goes ``compensating`` instead, in the same commit, with the first
compensation attempt scheduled:

* one attempt row per compensation, step id ``<step>@compensate`` (as gates
  are ``<step>@gate``), visible in ``sealflow status``; newest completed step
  first; each step once, however many times a loop visited it;
* scheduled through the same outbox / claim / fenced commit path as any step,
  so a worker killed mid-compensation leaves a lease that expires and the
  attempt runs again; what is left to do travels in the attempt's ``data``
  (``queue``, how the run ends, its dead letter), never in memory;
* the action runs with ``compensate.with`` rendered over the usual context
  (``steps.<id>.output`` is the step's own output), ``compensate.timeout``,
  and the idempotency key ``<run id>:<step id>:compensate`` through the
  ledger: a compensation that already succeeded is replayed, never redone;
  it does not see ``ctx.cancelled()`` (undoing must finish);
* a failure is retried by ``compensate.retry``; once retries are exhausted
  the run is **quarantined** with the reason (its dead letter marked
  quarantined) for an operator: a half-undone run must not be redriven
  blindly. When every compensation succeeded the run ends as it would have:
  ``failed`` (into the dead-letter list, with the original reason) or
  ``cancelled``;
* each start, success, replay, retry and failure is audited
  (``compensation.*``), besides the usual step events.

Entering compensation clears the run's timers and outbox (its deadline, an
approval's timeout): a run being undone does not time out half way. A run that
times out (``max_runtime``) is compensated too, except when its deadline passes
while one of its attempts runs (the sweeper or the worker ends it ``timed_out``
without compensation); see ``docs/security.md``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, cast

from sealflow.core import leases
from sealflow.core.clock import Clock
from sealflow.core.fingerprints import fingerprint
from sealflow.core.ids import compensation_id, is_compensation
from sealflow.core.jsonc import dumps_or_none
from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.dsl.errors import DslError
from sealflow.dsl.plan import CompensationPlan, Plan, PlanStep
from sealflow.engine.committing import AGAIN, commit_retrying
from sealflow.engine.decide import schedule_retry
from sealflow.execution import arguments
from sealflow.execution.calls import call, own_args
from sealflow.execution.context import Execution
from sealflow.execution.idempotency import ledger_lookup
from sealflow.policy import budgets
from sealflow.store.base import (
    AttemptRecord,
    AuditEvent,
    Commit,
    DeadLetterSpec,
    LedgerEntry,
    NextAttempt,
    RunChange,
    RunRecord,
    StepChange,
    Store,
)

log = logging.getLogger("sealflow.compensation")

_ENDINGS = ("failed", "cancelled", "timed_out")
_has: dict[str, bool] = {}


def key_for(run_id: str, step_id: str) -> str:
    """The idempotency key of a step's compensation."""
    return f"{run_id}:{step_id}:compensate"


def has_compensations(plan: Plan) -> bool:
    got = _has.get(plan.digest)
    if got is None:
        got = _has[plan.digest] = any(s.compensate is not None for s in plan.steps)
    return got


def _undoing(step: PlanStep) -> CompensationPlan:
    """The ``compensate`` of a step that is being undone: only steps that declare one are queued (:func:`queue`)."""
    return cast(CompensationPlan, step.compensate)


def lease_for(step: PlanStep) -> int:
    return leases.lease_ms(_undoing(step).timeout_ms)


def queue(store: Store, run_id: str, plan: Plan, newest: str | None = None) -> list[str]:
    """The run's completed steps that declare ``compensate``, newest first, each once (``newest``:
    a step completing in the commit being decided)."""
    undoable = {s.id for s in plan.steps if s.compensate is not None}
    done = [a.step_id for a in store.attempts(run_id) if a.state == "succeeded" and a.step_id in undoable]
    if newest in undoable:
        done.append(newest)
    return list(dict.fromkeys(reversed(done)))


def _first(plan: Plan, order: list[str], data: dict[str, Any], now: float) -> NextAttempt:
    step = plan.step(order[0])
    return NextAttempt(compensation_id(order[0]), 1, "scheduled", now, lease_for(step), None,
                       {**data, "queue": order[1:]})


#: the first compensation attempt of ``order`` (a fan-out's completed child: engine/fanout.py)
first_attempt = _first


def _started(actor: str, order: list[str], end: str) -> AuditEvent:
    return AuditEvent("compensation.started", None, actor, detail={"steps": order, "then": end})


# -- entering ---------------------------------------------------------------------------------------

def amend(x: Execution, commit: Commit) -> Commit:
    """``commit``, turned into the start of compensation when it ends the run ``failed``, ``timed_out``
    (the run deadline seen by a worker before a step, or a step failing after it) or ``cancelled`` and completed
    steps have something to undo. Not when the deadline stopped the attempt as it ran (its thread may still run;
    the sweeper does not compensate such a run either). Cheap when it does not apply."""
    change = commit.run
    if change.state not in _ENDINGS or is_compensation(x.step_id):
        return commit
    step = commit.step
    if budgets.stopped_at_deadline(x, None if step is None else step.state, change.state):
        return commit  # stopped by the run's deadline as it ran: not compensated, as when the sweeper finds it
    if step is not None and x.run.state == "cancelling" and step.state == "failed" \
            and step.error_class == "cancelled":
        step = dataclasses.replace(step, state="cancelled")  # it never started
        commit = dataclasses.replace(commit, step=step)
    if not has_compensations(x.plan):
        return commit
    newest = step.step_id if step is not None and step.state == "succeeded" else None
    order = queue(x.services.store, x.run.id, x.plan, newest)
    if not order:
        return commit
    end = change.state
    dead = commit.dead_letter
    data = {"end": end, "why": change.error_message or (dead.reason if dead else None),
            "dead_letter": None if dead is None else dataclasses.asdict(dead)}
    return dataclasses.replace(commit, step=step, run=dataclasses.replace(change, state="compensating"),
                               next=_first(x.plan, order, data, x.now), dead_letter=None,
                               audit=commit.audit + (_started(commit.actor, order, end),))


Plans = Callable[[str], Plan]
#: ``build(run, plan, active, order, now)``: the commit that starts compensation of an idle run
Build = Callable[[RunRecord, Plan, AttemptRecord | None, list[str], float], Commit]


def _start_while_idle(store: Store, plans: Plans, clock: Clock, run_id: str, build: Build, *,
                      needs_deadline: bool = False) -> bool:
    """Start compensation of an active run none of whose attempts is running, with the commit
    ``build(run, plan, active, order, now)`` makes; False when there is nothing to undo, an attempt
    is running or the run is no longer active. Retried when a worker or an operator moved the run."""

    def attempt() -> Commit | None:
        run = store.get_run(run_id)
        if run.state not in ("queued", "running", "waiting") or (needs_deadline and run.deadline is None):
            return None
        plan = plans(run.plan_digest)
        if not has_compensations(plan):
            return None
        active = store.active_attempt(run_id)
        if active is not None and active.state == "running":
            return None
        order = queue(store, run_id, plan)
        return build(run, plan, active, order, clock.now()) if order else None

    # a worker claimed or the run moved (a conflict, or a fenced token): look again
    return commit_retrying(store, clock, attempt, fenced=lambda exc: AGAIN) is not None


def cancel(store: Store, plans: Plans, clock: Clock, run_id: str, *, actor: str, reason: str = "") -> bool:
    """Cancel a run whose completed steps need undoing while none of its attempts runs: its
    pending attempt (scheduled, in backoff, waiting on a timer or an approval) is cancelled and
    compensation starts, in one commit. False when there is nothing to undo or an attempt is
    running (then :meth:`Store.cancel` does the rest: ``cancelling``, and the attempt's own commit
    starts compensation)."""
    why = reason or f"cancelled by {actor}"

    def build(run: RunRecord, plan: Plan, active: AttemptRecord | None, order: list[str], now: float) -> Commit:
        step = None if active is None else StepChange(active.step_id, active.attempt, active.token, "cancelled")
        return Commit(run_id=run_id, expected_rev=run.rev, step=step,
                      run=RunChange(state="compensating", error_class="cancelled", error_message=why),
                      next=_first(plan, order, {"end": "cancelled", "why": why, "dead_letter": None}, now),
                      audit=(AuditEvent("cancel_requested", None, actor, detail={"reason": reason} if reason
                                        else None), _started(actor, order, "cancelled")),
                      actor=actor)

    return _start_while_idle(store, plans, clock, run_id, build)


def stop_called(store: Store, plans: Plans, clock: Clock, run_id: str, *, actor: str, why: str,
                depth: int = 16) -> None:
    """The runs ``run_id``'s ``call`` steps started that are still in flight are cancelled first, each as a run
    of its own (:func:`cancel`: its completed steps undone with their compensations, or ``cancelling`` while an
    attempt runs), its own called runs before it. Called before the caller is cancelled or timed out: the store
    would otherwise stop them plainly, as it stops a fan-out's items (store/sql/children.py)."""
    from sealflow.core.states import RUN_FINAL
    from sealflow.store.errors import IllegalTransition
    from sealflow.store.records import CALL_INDEX

    if depth <= 0:
        return
    for kid in store.children(run_id):
        if kid.index != CALL_INDEX or kid.state in RUN_FINAL or kid.state in ("cancelling", "compensating"):
            continue
        stop_called(store, plans, clock, kid.id, actor=actor, why=why, depth=depth - 1)
        try:
            if not cancel(store, plans, clock, kid.id, actor=actor, reason=why):
                store.cancel(kid.id, clock.now(), actor=actor, reason=why)
        except IllegalTransition:  # it ended meanwhile
            continue


def deadline(store: Store, plans: Plans, clock: Clock, run_id: str) -> bool:
    """A run past its deadline whose completed steps need undoing, while none of its attempts runs: its
    pending attempt (a timer, a backoff, an approval) ends and compensation starts, then the run ends
    ``timed_out`` (dead-lettered), in one commit. False when it does not apply (nothing to undo, an
    attempt is running, the run is no longer active): the sweeper then times the run out as usual."""

    def build(run: RunRecord, plan: Plan, active: AttemptRecord | None, order: list[str], now: float) -> Commit:
        limit = plan.budget.max_runtime_ms
        why = "the run passed " + (f"its budget.max_runtime of {limit // 1000}s" if limit else "its deadline")
        step_id = None if active is None else active.step_id
        step = None if active is None else StepChange(
            active.step_id, active.attempt, active.token, "timed_out" if active.state == "waiting" else "cancelled")
        dead = DeadLetterSpec(step_id, f"run timed out: {why}", "timeout", fingerprint(step_id, "timeout", why))
        return Commit(run_id=run_id, expected_rev=run.rev, step=step,
                      run=RunChange(state="compensating", error_class="timeout", error_message=why),
                      next=_first(plan, order, {"end": "timed_out", "why": why,
                                                "dead_letter": dataclasses.asdict(dead)}, now),
                      audit=(_started("sweeper", order, "timed_out"),), actor="sweeper")

    return _start_while_idle(store, plans, clock, run_id, build, needs_deadline=True)


# -- one compensation attempt (claimed and committed by the engine) ---------------------------------

def execute(x: Execution) -> Outcome:
    """Call the step's compensate action (or replay its recorded result)."""
    comp = _undoing(x.step)
    key = key_for(x.run.id, x.step.id)
    recorded = ledger_lookup(x, key)
    if recorded is not None:
        return recorded
    act = x.services.registry.get(comp.action)
    if act is None:
        return Failed("configuration", f"unknown compensate action {comp.action!r} of step {x.step.id!r}: load the "
                                       "module that defines it (--actions pkg.module)")
    try:
        args = own_args(x.render(comp.args)) if comp.args else {}
    except DslError as exc:
        return Failed("invalid_request", f"compensate.with of step {x.step.id!r} could not be rendered: {exc}")
    args, wrong = arguments.prepare(act, comp.args or {}, args)
    if wrong is not None:
        return Failed("invalid_request", f"compensation of step {x.step.id!r}: {wrong}")
    return call(x, lambda ctx: act(ctx, **args), key, act=act, timeout_ms=comp.timeout_ms, cancellable=False)


def decide(x: Execution, outcome: Outcome, *, actor: str) -> Commit:
    """The commit for a compensation attempt's outcome: next compensation, the run's end, a retry, or quarantine."""
    run, att, comp = x.run, x.attempt, _undoing(x.step)
    data = dict(att.data)
    base = x.step.id
    info = {"step": base, "action": comp.action, "try": att.try_no}
    if isinstance(outcome, Succeeded):
        out_json = dumps_or_none(outcome.output)
        step = StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json=out_json)
        ledger = None if outcome.replayed or out_json is None else \
            LedgerEntry(run.tenant, key_for(run.id, base), run.id, att.step_id, out_json)
        audit = [AuditEvent("compensation.replayed" if outcome.replayed else "compensation.succeeded", att.step_id,
                            actor, detail=info)]
        rest = list(data.get("queue") or ())
        if rest:
            undo_next = x.plan.step(rest[0])
            following = NextAttempt(compensation_id(rest[0]), 1, "scheduled", x.now, lease_for(undo_next), None,
                                    {**data, "queue": rest[1:]})
            return Commit(run_id=run.id, expected_rev=run.rev, step=step, next=following, ledger=ledger,
                          audit=tuple(audit), actor=actor, dispatch_inline=True)
        end = data.get("end") or "failed"
        dead = data.get("dead_letter")
        spec = DeadLetterSpec(**dead) if end in ("failed", "timed_out") and dead else None
        audit.append(AuditEvent("compensation.finished", None, actor, detail={"then": end}))
        return Commit(run_id=run.id, expected_rev=run.rev, step=step, run=RunChange(state=end), ledger=ledger,
                      dead_letter=spec, audit=tuple(audit), actor=actor, dispatch_inline=True)
    failed = outcome if isinstance(outcome, Failed) else Failed("internal", f"unexpected outcome {outcome!r}")
    step = StepChange(att.step_id, att.attempt, att.token, "timed_out" if failed.timed_out else "failed",
                      error_class=failed.error_class, error_message=failed.message, error_trace=failed.trace)
    if failed.rerun:  # its process died (engine/poison): the same try again, not a retry
        nxt = NextAttempt(att.step_id, att.try_no, "scheduled", x.now, lease_for(x.step), None, failed.data or data)
        return Commit(run_id=run.id, expected_rev=run.rev, step=step, next=nxt, actor=actor, dispatch_inline=True,
                      audit=(AuditEvent("attempt_lost", att.step_id, actor,
                                        detail={**info, "message": failed.message}),))
    again = schedule_retry(comp.retry, att.step_id, att.try_no, failed, rng=x.services.rng, now=x.now,
                           lease=lease_for(x.step), actor=actor, data=data)
    if again is not None:
        nxt, event = again
        return Commit(run_id=run.id, expected_rev=run.rev, step=step, next=nxt, audit=(event,), actor=actor,
                      dispatch_inline=True)
    before = data.get("end") or "failed"
    why = data.get("why")
    had = f"the run had been cancelled ({why})" if before == "cancelled" else f"the run had failed ({why})"
    reason = (f"compensation of step {base!r} ({comp.action}) failed with {failed.error_class}: {failed.message}; "
              f"{had}; the run is quarantined: undo what is left by hand, then close it")
    spec = DeadLetterSpec(att.step_id, reason, failed.error_class,
                          fingerprint(att.step_id, failed.error_class, failed.message))
    failure = AuditEvent("compensation.failed", att.step_id, actor,
                         detail={**info, "error_class": failed.error_class, "left": list(data.get("queue") or ())})
    return Commit(run_id=run.id, expected_rev=run.rev, step=step,
                  run=RunChange(state="quarantined", error_class=failed.error_class, error_message=reason),
                  dead_letter=spec, audit=(failure,), actor=actor, dispatch_inline=True)


def check_redrive(run: RunRecord) -> None:
    """Refuse to redrive a run whose completed steps were compensated: rerunning its failed step would
    build on effects that were undone. Submit a new run instead."""
    from sealflow.store.errors import InvalidOperation

    if run.state != "quarantined" and run.cursor_step and is_compensation(run.cursor_step):
        raise InvalidOperation(f"run {run.id} cannot be redriven: its completed steps were compensated (undone); "
                               "submit a new run instead")
