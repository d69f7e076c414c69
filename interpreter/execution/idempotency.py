"""Idempotent effects: one effect per ``idempotency_key``.

The key is the step's rendered ``idempotency_key`` template, scoped by the
run's tenant. Before an action with a key runs, the ledger is read; an entry
means the effect already happened, and its recorded result is the step's
output (the action is not called; the audit says ``idempotent_replay``). A
fresh result is written to the ledger in the same atomic commit as the step's
success, so "effect recorded" and "step succeeded" cannot disagree after a
crash. The ledger key is unique: a second write of the same key keeps the
first result.

What this cannot cover alone: a worker that dies *after* the effect and
*before* the commit. The requeued attempt finds no entry and calls the action
again, with the same ``ctx.idempotency_key``: actions with external effects
pass it to the remote system (an HTTP ``Idempotency-Key``) so the effect still
happens once.
"""

from __future__ import annotations

from sealflow.core.outcomes import Succeeded
from sealflow.execution.context import Execution


def ledger_lookup(x: Execution, key: str) -> Succeeded | None:
    """The recorded result for ``key`` as a replayed success, or None when the effect has not run."""
    record = x.services.store.ledger_get(x.run.tenant, key)
    if record is None:
        return None
    return Succeeded(record.result, replayed=True,
                     detail={"idempotency_key": key, "recorded_by": record.run_id, "step": record.step_id})
