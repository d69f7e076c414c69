"""Notification deliveries in the store (:mod:`sealflow.store.deliveries`): written with the commit
that opens a gate, taken under a lease by a deliverer, settled as delivered, due again, or failed (audited).

Shared by both backends (the PostgreSQL store runs this SQL through its dialect and takes rows with
``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.deliveries import DELIVERY_STATES, DeliveryRecord, NewDelivery
from sealflow.store.sql.conn import Conn, Row
from sealflow.store.sql.rows import where

_COLS = "id, channel, kind, run_id, step_id, tenant, payload, state, attempts, next_at, created_at, updated_at, " \
        "last_error"

SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
  id TEXT PRIMARY KEY, channel TEXT NOT NULL, kind TEXT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL,
  tenant TEXT NOT NULL, payload TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending','delivered','failed')), attempts INTEGER NOT NULL DEFAULT 0,
  next_at REAL NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, last_error TEXT);
CREATE INDEX IF NOT EXISTS notifications_due ON notifications(state, next_at);
CREATE INDEX IF NOT EXISTS notifications_run ON notifications(run_id);
"""

PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION").replace("INTEGER", "BIGINT")

_INSERT = (f"INSERT INTO notifications ({_COLS}) VALUES (?,?,?,?,?,?,?,'pending',0,?,?,?,NULL)")
_DUE = (f"SELECT {_COLS} FROM notifications WHERE state = 'pending' AND next_at <= ? ORDER BY next_at, id "
        "LIMIT ?")


def _record(row: Row) -> DeliveryRecord:
    values = list(row)
    values[6] = json.loads(values[6])
    return DeliveryRecord(*values)


def insert(c: Conn, now: float, run_id: str, deliveries: tuple[NewDelivery, ...]) -> None:
    """Write ``deliveries`` of run ``run_id`` in the transaction ``c`` (due at once)."""
    c.executemany(_INSERT, [(d.id, d.channel, d.kind, run_id, d.step_id, d.tenant,
                             json.dumps(d.payload, sort_keys=True, separators=(",", ":")), now, now, now)
                            for d in deliveries])


class DeliveriesMixin:
    """Expects ``_tx``, ``_read`` and ``_audit`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _now(self) -> float: ...
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
        def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None) -> None: ...

    #: how due rows are locked while taken (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: the write lock)
    _LOCK_DELIVERIES = ""

    def _take_deliveries(self, c: Conn, now: float, limit: int, lease: float) -> list[DeliveryRecord]:
        rows = [_record(r) for r in c.execute(_DUE + self._LOCK_DELIVERIES, (now, limit)).fetchall()]
        if rows:
            c.executemany("UPDATE notifications SET attempts = attempts + 1, next_at = ?, updated_at = ? "
                          "WHERE id = ?", [(now + lease, now, r.id) for r in rows])
        return [_taken(r, now + lease, now) for r in rows]

    def take_deliveries(self, limit: int = 50, lease: float = 60.0) -> list[DeliveryRecord]:
        """Due pending deliveries (oldest first), each counted as one more attempt and due again only after
        ``lease`` seconds: the deliverer settles it before then, or another deliverer retries it."""
        now = self._now()
        with self._tx() as c:
            return self._take_deliveries(c, now, limit, lease)

    def settle_delivery(self, taken: DeliveryRecord, *, state: str, next_at: float | None = None,
                        error: str | None = None, actor: str = "notifier") -> bool:
        """Record the outcome of posting ``taken`` (as :meth:`take_deliveries` returned it) now: ``delivered``;
        ``pending`` again at ``next_at``; or ``failed`` for good (audited as ``notification_failed``).
        False when the row moved on meanwhile (its lease ran out and another deliverer took it)."""
        return self._settle_delivery(taken, self._now(), state, next_at, error, actor)

    def _settle_delivery(self, taken: DeliveryRecord, now: float, state: str, next_at: float | None,
                         error: str | None, actor: str) -> bool:
        if state not in DELIVERY_STATES:
            raise ValueError(f"a delivery is settled as one of {DELIVERY_STATES}, not {state!r}")
        with self._tx() as c:
            moved = c.execute("UPDATE notifications SET state = ?, next_at = ?, updated_at = ?, last_error = ? "
                              "WHERE id = ? AND state = 'pending' AND attempts = ?",
                              (state, now if next_at is None else next_at, now, error, taken.id,
                               taken.attempts)).rowcount
            if moved and state != "pending":
                self._audit(c, now, taken.run_id, taken.step_id, f"notification_{state}", actor, None, None,
                            {"notification": taken.id, "channel": taken.channel, "kind": taken.kind,
                             "attempts": taken.attempts, **({"error": error} if error else {})},
                            chain={"tenant": taken.tenant})
        return bool(moved)

    def retry_delivery(self, delivery_id: str, *, actor: str) -> DeliveryRecord | None:
        """Re-queue the failed delivery ``delivery_id``: pending again, due now, its attempts counted
        from 0 (audited ``notification_retried`` by ``actor``). Returns the row as it was before; None for an
        unknown id; a row that was not ``failed`` (by then) is returned and left as it is."""
        now = self._now()
        with self._tx() as c:
            got = c.execute(f"SELECT {_COLS} FROM notifications WHERE id = ?", (delivery_id,)).fetchall()
            if not got:
                return None
            row = _record(got[0])
            if row.state != "failed":
                return row
            if not c.execute("UPDATE notifications SET state = 'pending', attempts = 0, next_at = ?, updated_at = ? "
                             "WHERE id = ? AND state = 'failed'", (now, now, delivery_id)).rowcount:
                return dataclasses.replace(row, state="pending")  # another operator retried it meanwhile
            self._audit(c, now, row.run_id, row.step_id, "notification_retried", actor, None, None,
                        {"notification": row.id, "channel": row.channel, "kind": row.kind,
                         "attempts": row.attempts}, chain={"tenant": row.tenant})
        return row

    def deliveries(self, *, state: str | None = None, run_id: str | None = None,
                   limit: int = 100) -> list[DeliveryRecord]:
        """Deliveries, newest first (of ``state``, of run ``run_id``)."""
        clause, args = where(("state = ?", state), ("run_id = ?", run_id))
        return [_record(r) for r in self._read(f"SELECT {_COLS} FROM notifications{clause} "
                                               "ORDER BY created_at DESC, id DESC LIMIT ?", (*args, limit))]


def _taken(row: DeliveryRecord, next_at: float, now: float) -> DeliveryRecord:
    return dataclasses.replace(row, attempts=row.attempts + 1, next_at=next_at, updated_at=now)
