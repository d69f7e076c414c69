"""A person's call on a lost attempt whose outcome is unknown: run it again, it succeeded, or it failed.

An action registered ``honours_idempotency_key=False`` (its target cannot deduplicate: an SMS gateway, a legacy
API) may or may not have acted when its attempt was lost (:mod:`sealflow.engine.poison`); its
attempt waits at an *outcome unknown* gate. Whoever holds ``runs:resolve`` in the run's tenant (or an operator)
decides, with a reason saying what they checked:

* ``retry``: run the same try again (the person checked that nothing happened, or accepts a second effect);
  the count of losses goes on, so a step that keeps dying still becomes poison;
* ``succeeded``: the effect happened; the step succeeds with the ``output`` given, checked as an output of the
  step is (JSON, the payload limit, the step's ``validate`` rules) and recorded under the step's idempotency
  key when it has one; the run goes on;
* ``failed``: the step fails with ``worker_lost``, not retried (``on_error`` may route it).

Every decision is one fenced commit with an ``outcome_decided`` audit event (who, which, why); a refused one
changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sealflow.core.outcomes import Failed, Outcome, Succeeded
from sealflow.dsl import expressions
from sealflow.dsl.errors import DslError
from sealflow.engine.decide import as_json
from sealflow.engine.poison import LOST_BEFORE, OUTCOME_UNKNOWN
from sealflow.execution import arguments
from sealflow.steps.checks import validation_failure
from sealflow.store.base import AuditEvent
from sealflow.store.errors import InvalidOperation

if TYPE_CHECKING:
    from sealflow.execution.context import Execution

DECISIONS = ("retry", "succeeded", "failed")


def decision(decision: str, *, actor: str, reason: str,
             output: Any = None) -> Callable[[Execution], tuple[Outcome, tuple[AuditEvent, ...]]]:
    """What applying ``actor``'s ``decision`` to an outcome-unknown gate does (for the engine's fenced
    ``resolve(..., lost=True)``); a decision that is not one, or lacks its reason, is refused first."""
    if decision not in DECISIONS:
        raise InvalidOperation(f"{decision!r} is not a decision; choose one of: {', '.join(DECISIONS)}")
    if not (reason or "").strip():
        raise InvalidOperation("a decision on a lost attempt needs a reason (--reason TEXT) saying what you checked: "
                               "it is recorded in the audit trail")
    if decision != "succeeded" and output is not None:
        raise InvalidOperation("only a 'succeeded' decision takes an output")

    def decide(x: Execution) -> tuple[Outcome, tuple[AuditEvent, ...]]:
        gate = dict(x.attempt.data.get(OUTCOME_UNKNOWN) or {})
        detail = {"decision": decision, "by": actor, "reason": reason, "lost": gate.get("lost"),
                  "observed": gate.get("observed")}
        gate["decision"] = {"decision": decision, "by": actor, "reason": reason, "at": x.now}
        kept = {**x.attempt.data, OUTCOME_UNKNOWN: gate}
        if decision == "retry":
            again = {k: v for k, v in x.attempt.data.items() if k != OUTCOME_UNKNOWN}
            again[LOST_BEFORE] = int(gate.get("lost") or 0)
            outcome: Outcome = Failed("worker_lost", f"{actor} chose to run the lost attempt again: {reason}",
                                      rerun=True, data=again)
        elif decision == "failed":
            outcome = Failed("worker_lost", f"{actor} judged the lost attempt failed: {reason}", no_retry=True,
                             data=kept)
        else:
            outcome = _succeeded(x, output, kept)
        return outcome, (AuditEvent("outcome_decided", x.step_id, actor, detail=detail),)

    return decide


def _succeeded(x: Execution, output: Any, data: dict[str, Any]) -> Succeeded:
    """The step's success with ``output``, refused (nothing changed) unless it is an output the step may have."""
    candidate, _ = as_json(x, Succeeded(output))
    if isinstance(candidate, Failed):
        raise InvalidOperation(f"the output given cannot be the step's: {candidate.message}")
    act = x.services.registry.get(x.step.action) if x.step.action else None
    broken = arguments.check_output(act, output) if act is not None else None
    if broken is not None:
        raise InvalidOperation(f"the output given cannot be the step's: {broken}")
    failed = validation_failure(x, output)
    if failed is not None:
        raise InvalidOperation(f"the output given fails step {x.step.id!r}'s checks: {failed.message}")
    key = None
    if x.step.idempotency_key:  # recorded as the effect's result: a redrive replays it, never calls again
        try:
            key = expressions.to_text(x.render(x.step.idempotency_key))
        except DslError:
            key = None
    return Succeeded(output, ledger_key=key, data=data, detail={"decided_by": "person"})
