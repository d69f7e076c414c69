"""Lost attempts: the system's failure, not the step's; bounded, and a person's call when an effect may be doubled.

An attempt is *lost* when whoever ran it stopped before its result was committed: the worker died (SIGKILL,
out of memory, a segfault), stalled past its lease, or could not reach the store to commit (disk full,
read-only, the database away); under ``isolation: process`` when its child process died. A loss says nothing
about the step, so it never consumes the step's ``max_attempts``:

* the sweeper (:mod:`sealflow.store.sql.sweep`) puts a lost attempt back to ``scheduled`` under a
  new token, counts it in ``attempts.leases_lost`` and records what it observed in the attempt's
  ``error_message``; the worker that claims it **runs it again** (:func:`lost` returns None);
* an isolated child's death is seen at once: the attempt is recorded ``failed`` (``worker_lost``) and the same
  try is scheduled again, its count of losses carried in the new attempt's data (:func:`after_crash`);
* **poison**: once a step's attempt has been lost ``lost_attempts`` times in a row (the runtime configuration,
  default :data:`DEFAULT_LOST_ATTEMPTS`) it is not run again: the run is quarantined, dead-lettered with a
  reason starting ``poison:`` (no retry, no ``on_error`` route, never a loop);
* **outcome unknown**: an action registered with ``honours_idempotency_key=False`` (its target cannot
  deduplicate: an SMS gateway, a legacy API) may or may not have acted when its attempt was lost; it is not
  run again on its own: the attempt waits at an *outcome unknown* gate for an authorised person to choose
  retry, succeeded (with an output) or failed (:mod:`sealflow.runtime.outcomes`); nobody deciding
  within ``outcome_unknown_timeout`` fails the step (``worker_lost``, not retried; ``on_error`` may route it).

An action whose target honours keys runs again under the same idempotency key, as any retry does.
"""

from __future__ import annotations

from sealflow.core.ids import is_compensation
from sealflow.core.kinds import traits_of
from sealflow.core.outcomes import Failed, Outcome, Waiting
from sealflow.dsl.durations import format_ms
from sealflow.execution.context import Execution
from sealflow.store.base import AttemptRecord
from sealflow.store.errors import InvalidOperation

#: consecutive losses of one step's attempt after which it is poison (the runtime configuration's default)
DEFAULT_LOST_ATTEMPTS = 3
#: the most ``lost_attempts`` may be (as ``max_attempts``)
MAX_LOST_ATTEMPTS = 20
#: how long an outcome-unknown gate waits for a person, by default (72 h: a long weekend)
DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS = 72 * 3600 * 1000
#: attempt data: losses of the same try before this attempt (an isolated crash, or a person's "retry")
LOST_BEFORE = "lost_before"
#: attempt data: the outcome-unknown gate the attempt waits at
OUTCOME_UNKNOWN = "outcome_unknown"


def losses(attempt: AttemptRecord) -> int:
    """How many times in a row this step's current try was lost, this attempt's own losses included."""
    before = (attempt.data or {}).get(LOST_BEFORE, 0)
    return attempt.leases_lost + (before if isinstance(before, int) else 0)


def lost_attempts(x: Execution) -> int:
    """The runtime's bound on consecutive losses (``lost_attempts`` in the runtime configuration)."""
    config = x.services.config
    return DEFAULT_LOST_ATTEMPTS if config is None else config.lost_attempts


def _gate_timeout_ms(x: Execution) -> int:
    config = x.services.config
    return DEFAULT_OUTCOME_UNKNOWN_TIMEOUT_MS if config is None else config.outcome_unknown_timeout_ms


def lost(x: Execution) -> Outcome | None:
    """What a claimed attempt does instead of running: None (run it: it was never lost, or lost fewer than
    ``lost_attempts`` times), the poison failure, or the outcome-unknown gate; and for an attempt claimed
    back from that gate by its timer, the failure that nobody decided."""
    if x.resumed and OUTCOME_UNKNOWN in x.attempt.data:
        return _undecided(x)
    if x.attempt.leases_lost <= 0 or x.resumed or traits_of(x.step.kind).fans_out:  # (no code of its own: run it again)
        return None
    observed = x.attempt.error_message or "its lease expired before a result was committed"
    return _judged(x, losses(x.attempt), observed)


def after_crash(x: Execution, outcome: Outcome) -> Outcome:
    """``outcome`` unless it is an isolated child's death (``Failed.lost``): then run the same try again,
    or poison, or the outcome-unknown gate, as for a lease lost."""
    if not (isinstance(outcome, Failed) and outcome.lost):
        return outcome
    count = losses(x.attempt) + 1
    judged = _judged(x, count, outcome.message)
    if judged is not None:
        return judged
    return Failed("worker_lost", f"{outcome.message}; run again (lost {count} of {lost_attempts(x)} times in a "
                                 "row allowed)", rerun=True, data={**x.attempt.data, LOST_BEFORE: count})


def _judged(x: Execution, count: int, observed: str) -> Outcome | None:
    bound = lost_attempts(x)
    if count >= bound:
        return Failed("worker_lost", poison_message(x.step_id, count, observed), ends_run="quarantined",
                      detail={"poison": True, "lost": count, "lost_attempts": bound, "observed": observed})
    if unknown_outcome(x):
        return _gate(x, count, observed)
    return None


def poison_message(step_id: str, count: int, observed: str) -> str:
    """The poison step's message: what was observed the last time, and that the run is quarantined."""
    return (f"poison: step {step_id!r} was lost {count} times in a row (the runtime's lost_attempts), the last "
            f"time: {observed}; it is not run again: the run is quarantined for an operator")


def unknown_outcome(x: Execution) -> bool:
    """Whether a lost attempt of ``x``'s step may have acted on a target that cannot deduplicate: an action
    registered ``honours_idempotency_key=False``."""
    if x.step.kind != "action" or x.gate or is_compensation(x.step_id):  # (a compensation reruns: keyed)
        return False
    if x.step.action is None:  # (an action step names its action; none: nothing registered under it)
        return False
    act = x.services.registry.get(x.step.action)
    return act is not None and not act.honours_idempotency_key


def _gate(x: Execution, count: int, observed: str) -> Waiting:
    timeout = _gate_timeout_ms(x)
    gate = {"opened_at": x.now, "lost": count, "observed": observed, "action": x.step.action,
            "attempt": x.attempt.attempt, "timeout_ms": timeout}
    return Waiting(x.now + timeout / 1000.0, "approval_timeout", {**x.attempt.data, OUTCOME_UNKNOWN: gate},
                   event="outcome_unknown",
                   detail={"action": x.step.action, "lost": count, "observed": observed,
                           "why": "the action does not honour idempotency keys: it may or may not have acted; "
                                  "a person decides (retry, succeeded or failed)"})


def _undecided(x: Execution) -> Failed:
    gate = x.attempt.data.get(OUTCOME_UNKNOWN) or {}
    after = format_ms(int(gate.get("timeout_ms") or _gate_timeout_ms(x)))
    return Failed("worker_lost", f"nobody decided the outcome of step {x.step_id!r}'s lost attempt within {after} "
                                 f"({gate.get('observed', 'its attempt was lost')}); it is not run again",
                  no_retry=True, detail={"decision": "outcome_unknown_expired", "lost": gate.get("lost")})


def check_waits_for(x: Execution, *, lost: bool, event: bool = False, callback: bool = False) -> None:
    """Refuse (:class:`InvalidOperation`) a decision that is not what the waiting attempt ``x`` waits for: an
    approval's (``lost`` False), a lost attempt's unknown outcome (``lost`` True), an event's (``event``) or a
    callback's (``callback``)."""
    run_id, base = x.run.id, x.step.id
    unknown = OUTCOME_UNKNOWN in x.attempt.data
    if callback:
        if unknown or x.gate or x.step.callback is None or "callback" not in x.attempt.data:
            raise InvalidOperation(f"run {run_id} is waiting at step {base!r}, which does not wait for a callback")
        return
    if event:
        if unknown or x.gate or x.step.wait is None or x.step.wait.event is None:
            raise InvalidOperation(f"run {run_id} is waiting at step {base!r}, which does not wait for an event")
        return
    if unknown != lost:
        raise InvalidOperation(
            f"run {run_id} waits for a person to decide the outcome of step {base!r}'s lost attempt, not for an "
            f"approval: use `sealflow resolve {run_id}`" if unknown else
            f"run {run_id} is waiting at step {base!r}, which is not a lost attempt's decision")
    if not lost and not x.gate and x.step.kind != "approval" and "opened_at" not in x.attempt.data:
        raise InvalidOperation(f"run {run_id} is waiting at {x.step.kind} step {base!r}, which is not an approval")
