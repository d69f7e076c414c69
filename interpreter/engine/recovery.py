"""Recovery: find the runs in flight and drive them on, after a crash or at start.

A process killed with SIGKILL at any instant loses nothing, because the store
is the truth and every state change was one atomic commit (see the invariants
in :mod:`sealflow.interpreter.store.base`). What recovery does, in order:

1. leases held by dead workers of this host (their pid no longer exists) are
   ended now instead of at their expiry (other hosts' leases simply expire);
2. a fresh embedded runtime marks every sent-but-unclaimed outbox row unsent:
   the in-memory broker that held those messages died with its process;
3. a sweep requeues expired leases and turns due timers into outbox rows;
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
from typing import TYPE_CHECKING

from sealflow.interpreter.core.outcomes import Failed, Outcome, Skipped, Succeeded
from sealflow.interpreter.store.base import AttemptRecord, AuditEvent, Commit, Message, NextAttempt
from sealflow.interpreter.engine import decide as flow

if TYPE_CHECKING:
    from sealflow.interpreter.engine.engine import Engine

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


def expire_dead_owners(engine: "Engine") -> int:
    store, now, count = engine.store, engine.clock.now(), 0
    for owner in store.lease_owners():
        if owner != engine.owner and owner_is_dead(owner):
            count += store.expire_leases(owner, now)
    return count


def _outcome_of(engine: "Engine", attempt: AttemptRecord, kind: str, skip_target: str) -> Outcome | None:
    if attempt.state == "succeeded":
        nxt = attempt.output.get("next") if kind == "switch" and isinstance(attempt.output, dict) else None
        return Succeeded(attempt.output, next=nxt)
    if attempt.state == "skipped":
        return Skipped(skip_target)
    if attempt.state in ("failed", "timed_out"):
        return Failed(attempt.error_class or "internal", attempt.error_message or "",
                      timed_out=attempt.state == "timed_out")
    return None


def repair(engine: "Engine", run_id: str) -> tuple[Message, ...]:
    """Decide again from the run's latest finished attempt (or schedule its start if it has none)."""
    from sealflow.interpreter.engine.engine import _skip_target, split_step_id

    store = engine.store
    run = store.get_run(run_id)
    plan = engine.plan(run.plan_digest)
    attempts = store.attempts(run_id)
    store.append_audit(AuditEvent("run_repaired", None, "recovery", run_id=run_id,
                                  detail={"state": run.state, "attempts": len(attempts)}), engine.clock.now())
    if not attempts:
        first = plan.step(plan.start)
        commit = Commit(run_id, run.rev, next=NextAttempt(plan.start, 1, "scheduled", engine.clock.now(),
                                                          flow.lease_ms(first)), actor="recovery",
                        dispatch_inline=True)
        return store.commit(commit, engine.clock.now()).messages
    last = max(attempts, key=lambda a: (a.ended_at or a.scheduled_at or 0.0, a.attempt))
    step = plan.step(split_step_id(last.step_id)[0])
    outcome = _outcome_of(engine, last, step.kind, _skip_target(step))
    if outcome is None or run.state == "compensating" or last.step_id.endswith("@compensate"):
        # a compensation's way on is in its attempt data, not in the plan's edges: never guess it
        log.error("run %s is %s with no active attempt and its last attempt is %s; fail or cancel it by hand",
                  run_id, run.state, last.state)
        return ()
    x = engine.execution(run, last, store.results(run_id), resumed=False)
    return engine.commit(x, outcome, actor="recovery", counts_step=False)
