"""Run and step state machines, as data.

Every state change the store applies is checked against these tables; an
edge that is not listed is refused (:class:`sealflow.store.errors.IllegalTransition`)
and audited as ``illegal_transition``, never applied. DSL.md gives the main
path; the extra edges a durable engine needs are listed with the reason for
each.

A *step attempt* is one row per try of one step: ``pending`` is its origin
(a new row may be inserted in any state reachable from ``pending``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class RunState(StrEnum):
    """A run's state (stored and printed as its plain string)."""

    CREATED = "created"
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    QUARANTINED = "quarantined"
    COMPENSATING = "compensating"


class StepState(StrEnum):
    """A step attempt's state (stored and printed as its plain string)."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY_WAIT = "retry_wait"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    WAITING = "waiting"


# -- runs ------------------------------------------------------------------------------------------

#: the tables below hold the plain strings (what the store reads back), in this order
RUN_STATES = tuple(s.value for s in RunState)

RUN_TRANSITIONS: Mapping[str, frozenset[str]] = {
    # submit inserts the row and queues its first step in the same commit
    "created": frozenset({"queued", "cancelled"}),
    # queued: a step is due but none has been claimed yet.
    #   -> running: a worker claimed the first step
    #   -> cancelled / timed_out: cancel or run deadline before any worker ran
    #   -> cancelling: never needed (nothing runs), kept out on purpose
    #   -> failed: admission-time failure (budget exhausted before the first claim)
    #   -> compensating: a redriven run (with completed steps) cancelled before a worker claimed it
    "queued": frozenset({"running", "cancelled", "timed_out", "failed", "compensating"}),
    # running: a step is claimed, or scheduled, or in retry backoff.
    #   -> waiting: a `wait:` step or an approval gate holds the run
    #   -> cancelling: cancel while an attempt is running (it finishes, then -> cancelled)
    #   (a redriven run that fails again the same way goes running -> failed -> quarantined
    #   in one commit, both edges audited)
    #   -> compensating: it would fail or be cancelled and completed steps have `compensate`
    #   -> quarantined: a poison step (its attempt lost `lost_attempts` times in a row: engine/poison.py)
    "running": frozenset({"waiting", "completed", "failed", "cancelling", "cancelled", "timed_out", "compensating",
                          "quarantined"}),
    # waiting: a timer or a human holds the run; no worker is held.
    #   -> running: the timer fired or an approval arrived and the run goes on
    #   -> failed: approval rejected / timed out and no on_error route
    #   -> completed: approved gate before `end`
    "waiting": frozenset({"running", "completed", "failed", "cancelling", "cancelled", "timed_out", "compensating"}),
    # cancelling: the running attempt finishes (or its lease expires), then the run is cancelled.
    #   -> timed_out: the run deadline fires first
    #   -> compensating: the attempt ended and completed steps have `compensate` (saga)
    "cancelling": frozenset({"cancelled", "timed_out", "compensating"}),
    # compensating: the `compensate` actions of completed steps run, newest first
    #   (sealflow.engine.compensation); then the run ends as it would have (failed, into the
    #   dead-letter list, or cancelled), or -> quarantined when a compensation fails for good
    "compensating": frozenset({"failed", "cancelled", "timed_out", "quarantined"}),
    # completed -> compensating: a fan-out child run whose parent step failed beyond its tolerance undoes
    #   its completed steps (engine/fanout.py); the store allows it for child runs only
    "completed": frozenset({"compensating"}),
    # failed -> queued: a dead-letter redrive (on the original plan digest)
    # failed -> quarantined: the same failure fingerprint repeated across redrives
    "failed": frozenset({"queued", "quarantined"}),
    "cancelled": frozenset(),
    # timed_out -> queued: a dead-letter redrive with a fresh deadline
    "timed_out": frozenset({"queued", "quarantined"}),
    # quarantined runs are out of the automatic path for good; an operator reads them
    "quarantined": frozenset(),
}

#: runs that will not change again without an operator (redrive)
RUN_FINAL = frozenset({"completed", "failed", "cancelled", "timed_out", "quarantined"})
#: runs a worker may make progress on
RUN_ACTIVE = frozenset({"queued", "running", "waiting"})
#: runs whose scheduled attempts a worker may claim: active ones, a cancelling run's requeued attempt
#: (the worker does not start it: the run is cancelled), a compensating run's compensations
RUN_CLAIMABLE = RUN_ACTIVE | {"cancelling", "compensating"}

# -- step attempts ---------------------------------------------------------------------------------

STEP_STATES = tuple(s.value for s in StepState)

STEP_TRANSITIONS: Mapping[str, frozenset[str]] = {
    # pending: the origin of every attempt row.
    #   -> scheduled: due now, a message is in the outbox
    #   -> retry_wait: a retry attempt, due when its backoff timer fires
    #   -> waiting: an approval gate opened by `requires_approval_if` (no work to claim)
    "pending": frozenset({"scheduled", "retry_wait", "waiting", "cancelled"}),
    # scheduled -> cancelled: cancel / run deadline before a worker claimed it
    "scheduled": frozenset({"running", "cancelled"}),
    # running:
    #   -> scheduled: its lease expired (worker died); requeued with a new fencing token
    #   -> skipped: its `when` was false at claim time
    #   -> waiting: a `wait:` step or an `approval:` step holds it (timer / human)
    #   -> timed_out: per-attempt timeout, or the run deadline fenced it off
    #   -> cancelled: the run was cancelled while it ran
    "running": frozenset({"succeeded", "failed", "retry_wait", "skipped", "cancelled", "timed_out", "waiting",
                          "scheduled"}),
    # retry_wait -> scheduled: the backoff timer fired
    "retry_wait": frozenset({"scheduled", "cancelled"}),
    # waiting:
    #   -> running: its timer fired and a worker claimed it (wait done / approval timeout)
    #   -> succeeded: approved (quorum reached)
    #   -> failed: rejected (policy_denied)
    #   -> cancelled / timed_out: run cancelled / run deadline
    "waiting": frozenset({"running", "succeeded", "failed", "cancelled", "timed_out"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "skipped": frozenset(),
    "cancelled": frozenset(),
    "timed_out": frozenset(),
}

STEP_FINAL = frozenset({"succeeded", "failed", "skipped", "cancelled", "timed_out"})
#: an attempt in one of these holds the run's single cursor
STEP_ACTIVE = frozenset({"pending", "scheduled", "running", "retry_wait", "waiting"})


def run_can(before: str, after: str) -> bool:
    """True when a run may go from ``before`` to ``after`` (staying put is always allowed)."""
    return before == after or after in RUN_TRANSITIONS.get(before, ())


def step_can(before: str, after: str) -> bool:
    """True when a step attempt may go from ``before`` to ``after`` (staying put is always allowed)."""
    return before == after or after in STEP_TRANSITIONS.get(before, ())


def _check_tables() -> None:
    for table, states in ((RUN_TRANSITIONS, RUN_STATES), (STEP_TRANSITIONS, STEP_STATES)):
        assert set(table) == set(states), "every state needs a row"
        for targets in table.values():
            assert targets <= set(states), f"unknown target in {targets}"


_check_tables()
