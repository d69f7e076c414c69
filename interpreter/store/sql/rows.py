"""Row <-> record conversion for the SQLite store (column lists kept next to their decoders)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from sealflow.core.jsonc import dumps_record
from sealflow.store.base import (
    AttemptRecord,
    AuditRecord,
    DeadLetterRecord,
    LedgerRecord,
    OutboxRecord,
    RunRecord,
    TimerRecord,
)
from sealflow.store.sql.conn import Row

loads = json.loads

#: the store's own records (audit details, attempt data): text no store could hold is kept as its escapes
dumps = dumps_record


RUN_COLS = ("id, tenant, workflow, workflow_version, plan_digest, input, state, rev, initiator, idempotency_key, "
            "input_hash, created_at, updated_at, deadline, output, error_class, error_message, steps_executed, "
            "tokens, cost_usd, tool_calls, redrives, cursor_step, cursor_attempt, priority, acting_as, access_mode, "
            "signer, parent_run_id, parent_step_id, parent_attempt, item_index, item")

#: the columns of a run that change over its life (every other one is set once, at submit)
RUN_CHANGING = ("state, rev, updated_at, deadline, output, error_class, error_message, steps_executed, tokens, "
                "cost_usd, tool_calls, redrives, cursor_step, cursor_attempt, signer")

ATTEMPT_COLS = ("run_id, step_id, attempt, try_no, state, token, lease_owner, lease_expires, lease_ms, scheduled_at, "
                "started_at, ended_at, due_at, output, error_class, error_message, data, leases_lost")

AUDIT_COLS = ("id, run_id, step_id, event, actor, state_before, state_after, detail, ts, tenant, workflow, "
              "workflow_version, plan_digest, decision, tool, summary, error, seq, prev_hash, hash")
DLQ_COLS = (
    "run_id, step_id, reason, error_class, fingerprint, redrive_count, quarantined, status, created_at, updated_at"
)


ACTIVE = "('pending','scheduled','running','retry_wait','waiting')"
#: join condition: the run's cursor attempt (its single active attempt, invariant 1)
#: outbox rows of higher-priority runs go out first (sealflow.runtime.priority)
PRIORITY_RANK = "CASE r.priority WHEN 'critical' THEN 0 WHEN 'high' THEN 1 WHEN 'low' THEN 3 ELSE 2 END"
CURSOR = "a.run_id = r.id AND a.step_id = r.cursor_step AND a.attempt = r.cursor_attempt"
A_COLS = ", ".join("a." + c.strip() for c in ATTEMPT_COLS.split(","))
R_COLS = ", ".join("r." + c.strip() for c in RUN_COLS.split(","))
N_ATTEMPT = len(ATTEMPT_COLS.split(","))
# audit rows are written only through sealflow.store.auditchain (hash-chained per tenant)


def new_token() -> int:
    """A fresh attempt token: random, so a forged message cannot guess it; claims then count up."""
    return random.getrandbits(40) + 1


def run(row: Sequence[Any]) -> RunRecord:
    r = list(row)
    r[5] = loads(r[5])
    r[14] = None if r[14] is None else loads(r[14])
    r[32] = None if r[32] is None else loads(r[32])
    return RunRecord(*r)


def run_over(base: RunRecord, row: Sequence[Any]) -> RunRecord:
    """``base`` (a record of the same run) with its changing columns as ``row`` (:data:`RUN_CHANGING`) has them."""
    (state, rev, updated_at, deadline, output, error_class, error_message, steps_executed, tokens, cost_usd,
     tool_calls, redrives, cursor_step, cursor_attempt, signer) = row
    return RunRecord(base.id, base.tenant, base.workflow, base.workflow_version, base.plan_digest, base.input, state,
                     rev, base.initiator, base.idempotency_key, base.input_hash, base.created_at, updated_at, deadline,
                     None if output is None else loads(output), error_class, error_message, steps_executed, tokens,
                     cost_usd, tool_calls, redrives, cursor_step, cursor_attempt, base.priority, base.acting_as,
                     base.access_mode, signer, base.parent_run_id, base.parent_step_id, base.parent_attempt,
                     base.item_index, base.item)


def attempt(row: Sequence[Any]) -> AttemptRecord:
    r = list(row)
    r[13] = None if r[13] is None else loads(r[13])
    r[16] = {} if r[16] is None else loads(r[16])
    return AttemptRecord(*r)


def audit(row: Row) -> AuditRecord:
    r = list(row)
    r[7] = None if r[7] is None else loads(r[7])
    return AuditRecord(*r)


def dead_letter(row: Row) -> DeadLetterRecord:
    r = list(row)
    r[6] = bool(r[6])
    return DeadLetterRecord(*r)


def timer(row: Row) -> TimerRecord:
    return TimerRecord(*row)


def outbox(row: Row) -> OutboxRecord:
    return OutboxRecord(*row)


def ledger(row: Row) -> LedgerRecord:
    r = list(row)
    r[4] = None if r[4] is None else loads(r[4])
    return LedgerRecord(*r)


def where(*terms: tuple[str, object]) -> tuple[str, tuple[Any, ...]]:
    """``(" WHERE a = ? AND b > ?", args)`` of the ``(condition, value)`` terms whose value is not None (a tuple
    value fills a condition of several ``?``); ``("", ())`` when none is. The filters of the list reads."""
    sql: list[str] = []
    args: list[object] = []
    for condition, value in terms:
        if value is None:
            continue
        sql.append(condition)
        args.extend(value if isinstance(value, tuple) else (value,))
    return (f" WHERE {' AND '.join(sql)}" if sql else ""), tuple(args)
