"""Reading the SQLite store: the ledger, dead letters, timers, the outbox, the audit trail and chains, tenant usage."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from sealflow.store.auditchain import VERIFY_COLS
from sealflow.store.base import (
    AuditRecord,
    DeadLetterRecord,
    LedgerRecord,
    OutboxRecord,
    TimerRecord,
)
from sealflow.store.sql import admission as sqlite_admission
from sealflow.store.sql import rows
from sealflow.store.sql.conn import Conn, Row
from sealflow.store.sql.statements import tenant_args, tenant_is


class _OneConnection(Protocol):
    """A store on one connection under a lock (the SQLite store; the PostgreSQL store reads usage its own way)."""

    @property
    def _lock(self) -> AbstractContextManager[object]: ...

    @property
    def _conn(self) -> sqlite3.Connection: ...


class Reads:
    """Read-only methods of :class:`~sealflow.store.sql.store.SqlStore` (``_read`` and the
    row converters)."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
        def _reading(self) -> AbstractContextManager[Conn]: ...

    def ledger_get(self, tenant: str, key: str) -> LedgerRecord | None:
        got = self._read("SELECT tenant, key, run_id, step_id, result, created_at FROM ledger WHERE tenant = ? AND "
                         "key = ?", (tenant, key))
        return rows.ledger(got[0]) if got else None

    def dead_letters(self, *, include_redriven: bool = False) -> list[DeadLetterRecord]:
        where = "" if include_redriven else "WHERE status != 'redriven'"
        return [rows.dead_letter(r) for r in self._read(f"SELECT {rows.DLQ_COLS} FROM dead_letters {where} "
                                                        "ORDER BY updated_at")]

    def dead_letter(self, run_id: str) -> DeadLetterRecord | None:
        got = self._read(f"SELECT {rows.DLQ_COLS} FROM dead_letters WHERE run_id = ?", (run_id,))
        return rows.dead_letter(got[0]) if got else None

    def due_deadlines(self, now: float) -> list[str]:
        return [r[0] for r in self._read("SELECT run_id FROM timers WHERE kind = 'run_deadline' AND fire_at <= ? "
                                         "ORDER BY fire_at", (now,))]

    def timers(self, run_id: str | None = None) -> list[TimerRecord]:
        sql = "SELECT id, run_id, step_id, attempt, token, kind, fire_at FROM timers"
        got = self._read(sql + " WHERE run_id = ? ORDER BY fire_at", (run_id,)) if run_id else \
            self._read(sql + " ORDER BY fire_at")
        return [rows.timer(r) for r in got]

    def outbox(self, run_id: str | None = None) -> list[OutboxRecord]:
        sql = "SELECT run_id, step_id, attempt, token, due_at, sent_at FROM outbox"
        got = self._read(sql + " WHERE run_id = ? ORDER BY due_at", (run_id,)) if run_id else \
            self._read(sql + " ORDER BY due_at")
        return [rows.outbox(r) for r in got]

    def audit(self, run_id: str | None = None, *, limit: int | None = None,
              event: str | None = None, after: int | None = None) -> list[AuditRecord]:
        lim = f" LIMIT {int(limit)}" if limit else ""
        cond, args = rows.where(("id > ?", None if after is None else int(after)), ("run_id = ?", run_id),
                                ("event = ?", event))
        got = self._read(f"SELECT {rows.AUDIT_COLS} FROM audit{cond} ORDER BY id{lim}", args)
        return [rows.audit(r) for r in got]

    def audit_last_id(self) -> int:
        got = self._read("SELECT MAX(id) FROM audit")
        return int(got[0][0] or 0)

    # -- the audit chain and tenant usage ------------------------------------------------------------
    def audit_chain(self, tenant: str | None) -> list[Row]:
        return self._read(f"SELECT {VERIFY_COLS} FROM audit WHERE {tenant_is(tenant)} ORDER BY id", tenant_args(tenant))

    def audit_heads(self) -> dict[str, tuple[int, str]]:
        return {r[0]: (r[1], r[2]) for r in self._read("SELECT tenant, seq, hash FROM audit_heads")}

    def audit_snapshot(self, tenant: str | None) -> tuple[tuple[int, str] | None, list[Row]]:
        # one read transaction (SQLite: one WAL snapshot; PostgreSQL: REPEATABLE READ): both reads see one moment
        with self._reading() as c:
            where, args = tenant_is(tenant), tenant_args(tenant)
            head = c.execute(f"SELECT seq, hash FROM audit_heads WHERE {where}", args).fetchone()
            chain = c.execute(f"SELECT {VERIFY_COLS} FROM audit WHERE {where} ORDER BY id", args).fetchall()
        return (None if head is None else (head[0], head[1])), chain

    def audit_tenants(self) -> list[str | None]:
        """Every tenant with audit events (None: events that name no tenant, i.e. were not chained)."""
        return [r[0] for r in self._read("SELECT DISTINCT tenant FROM audit")]

    def tenant_usage(self: _OneConnection, tenant: str, day: int) -> tuple[int, float]:
        with self._lock:
            return sqlite_admission.usage(self._conn, tenant, day)
