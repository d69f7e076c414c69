"""Poison steps are bounded: an attempt whose lease expired counts as a failed attempt.

When a worker dies (SIGKILL, an out-of-memory kill, a segfault in a C extension) or stalls past its
lease, the sweeper (:mod:`sealflow.interpreter.store.sqlite.sweep`) puts the attempt back to
``scheduled`` under a new fencing token and counts the loss in ``attempts.leases_lost``. The worker
that claims it next does **not** run it again: it records the attempt as failed with error class
``worker_lost`` and decides as for any failure (:mod:`sealflow.interpreter.engine.decide`): another
try while ``max_attempts`` allows (``worker_lost`` is retried listed or not), else an ``on_error``
route, else the run fails into the dead-letter list; a redrive that dies the same way has the same
fingerprint and is quarantined. So a step that kills its worker runs at most ``max_attempts`` times.

Under process isolation (:mod:`sealflow.interpreter.execution.isolation`) a crash ends only the
attempt's child process and is recorded as ``worker_lost`` at once, without waiting for the lease.
"""

from __future__ import annotations

from sealflow.interpreter.core.outcomes import Failed
from sealflow.interpreter.execution.context import Execution


def lost_message(step_id: str) -> str:
    """The message of a lost attempt: the same every time (it is part of the dead letter's fingerprint)."""
    return (f"the worker running step {step_id!r} was lost before the attempt finished: its lease expired "
            "(the process died, was killed or stalled)")


#: kinds that run no code of their own: an attempt of one whose worker died is simply run again
_NO_CODE = ("map", "parallel")


def lost(x: Execution) -> Failed | None:
    """The failure to record for a claimed attempt whose lease expired before (None: run it). A fan-out
    step's attempt runs no user code (it starts its children, or reads how they ended): it runs again."""
    if x.attempt.leases_lost <= 0 or x.resumed or x.step.kind in _NO_CODE:
        return None
    return Failed("worker_lost", lost_message(x.step_id))
