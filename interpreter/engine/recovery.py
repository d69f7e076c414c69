"""Recovery: find the runs in flight and drive them on, after a crash or at start.

A process killed with SIGKILL at any instant loses nothing, because the store
is the truth and every state change was one atomic commit (see the invariants
in :mod:`sealflow.store.base`). What recovery does, in order:

1. leases held by dead workers of this host (their pid no longer exists) are
   ended now instead of at their expiry (other hosts' leases simply expire);
2. a fresh embedded runtime marks every sent-but-unclaimed outbox row unsent:
   the in-memory broker that held those messages died with its process;
3. a sweep requeues expired leases (each counted as a loss, run again up to ``lost_attempts`` in a row:
   :mod:`.poison`) and turns due timers into outbox rows;
4. a run that is active but has no active attempt (which atomic commits rule
   out; this is a safety net) is repaired by deciding again from its latest
   finished attempt.

Completed steps are never repeated: their results are in the store; effects
with an idempotency key are in the ledger and are replayed, not redone.
"""

from __future__ import annotations

import logging
import os
import socket

from sealflow.core.ids import is_compensation
from sealflow.core.kinds import traits_of
from sealflow.core.outcomes import Failed, Outcome, Skipped, Succeeded
from sealflow.dsl.plan import Plan, PlanStep
from sealflow.engine.decide import lease_ms, skip_target
from sealflow.store.base import AttemptRecord, Commit, NextAttempt, RunRecord, Store
from sealflow.store.capabilities import Heartbeats

log = logging.getLogger("sealflow.recovery")


def owner_id() -> str:
    """``host:pid:random``: who holds a lease; the host and pid let recovery tell a dead worker."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` ran on this host and its process no longer exists."""
    parts = owner.split(":")
    if len(parts) < 2 or parts[0] != socket.gethostname():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def expire_dead_owners(store: Store, now: float, owner: str, *, silent_for: float | None = None,
                       heartbeats: Heartbeats | None = None) -> int:
    """End now the leases of dead workers (all but ``owner``, this process); how many.

    A store that records heartbeats (its :class:`~sealflow.store.capabilities.Heartbeats`
    capability, given as ``heartbeats``: the PostgreSQL store) knows the workers of every machine: given
    ``silent_for`` too, a worker is dead when its last heartbeat is older than that. Otherwise only this
    host's workers can be judged, by their pid (``owner_is_dead``)."""
    count = 0
    if silent_for is not None and heartbeats is not None:
        for other in heartbeats.dead_workers(silent_for):
            if other != owner:
                count += store.expire_leases(other, now, f"sent no heartbeat for {silent_for:g} s")
        return count
    for other in store.lease_owners():
        if other != owner and owner_is_dead(other):
            count += store.expire_leases(other, now, "its process no longer exists")
    return count


def outcome_of(attempt: AttemptRecord, step: PlanStep) -> Outcome | None:
    """The outcome a finished ``attempt`` of ``step`` had, to decide again from (None: not finished)."""
    if attempt.state == "succeeded":
        out = attempt.output
        nxt = out.get("next") if traits_of(step.kind).routes and isinstance(out, dict) else None
        return Succeeded(out, next=nxt)
    if attempt.state == "skipped":
        return Skipped(skip_target(step))
    if attempt.state in ("failed", "timed_out"):
        return Failed(attempt.error_class or "internal", attempt.error_message or "",
                      timed_out=attempt.state == "timed_out")
    return None


def start_commit(run: RunRecord, plan: Plan, now: float) -> Commit:
    """The commit that schedules a run's first step (a run that has no attempt at all)."""
    first = plan.step(plan.start)
    return Commit(run_id=run.id, expected_rev=run.rev, next=NextAttempt(plan.start, 1, "scheduled", now,
                                                                         lease_ms(first)),
                  actor="recovery", dispatch_inline=True)


def last_finished(attempts: list[AttemptRecord]) -> AttemptRecord:
    return max(attempts, key=lambda a: (a.ended_at or a.scheduled_at or 0.0, a.attempt))


def may_decide_again(run: RunRecord, last: AttemptRecord, outcome: Outcome | None) -> bool:
    """Whether a run can be driven on from ``last``: never a compensation (its way on is in its attempt
    data, not in the plan's edges: never guess it)."""
    if outcome is None or run.state == "compensating" or is_compensation(last.step_id):
        log.error("run %s is %s with no active attempt and its last attempt is %s; fail or cancel it by hand",
                  run.id, run.state, last.state)
        return False
    return True
