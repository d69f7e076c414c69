"""Signed events in the store (``POST /v1/events/{source}``, :mod:`sealflow.server.events`): the first
answer given to each event id, so a retried delivery gets the same answer, and the last sequence applied per
ordering key, so an older event is recorded and not run.

Shared by both backends (the PostgreSQL store runs this SQL through its dialect).
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  source TEXT NOT NULL, event_id TEXT NOT NULL, received_at REAL NOT NULL, answer TEXT NOT NULL,
  PRIMARY KEY (source, event_id));
CREATE TABLE IF NOT EXISTS event_order (
  scope TEXT NOT NULL, order_key TEXT NOT NULL, sequence INTEGER NOT NULL, event_id TEXT NOT NULL,
  updated_at REAL NOT NULL, PRIMARY KEY (scope, order_key));
"""

PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  source TEXT NOT NULL, event_id TEXT NOT NULL, received_at DOUBLE PRECISION NOT NULL, answer TEXT NOT NULL,
  PRIMARY KEY (source, event_id));
CREATE TABLE IF NOT EXISTS event_order (
  scope TEXT NOT NULL, order_key TEXT NOT NULL, sequence BIGINT NOT NULL, event_id TEXT NOT NULL,
  updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (scope, order_key));
"""


class EventsMixin:
    """Expects ``_tx`` and ``_read`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def event_answer(self, source: str, event_id: str) -> dict[str, Any] | None:
        """The answer recorded for event ``event_id`` of ``source`` (None: not seen)."""
        got = self._read("SELECT answer FROM events WHERE source = ? AND event_id = ?", (source, event_id))
        return json.loads(got[0][0]) if got else None

    def record_event(self, source: str, event_id: str, answer: dict[str, Any], now: float) -> dict[str, Any]:
        """Record ``answer`` for the event unless one is recorded already; return the recorded (first) one."""
        with self._tx() as c:
            row = c.execute("SELECT answer FROM events WHERE source = ? AND event_id = ?",
                            (source, event_id)).fetchone()
            if row is not None:
                first: dict[str, Any] = json.loads(row[0])
                return first
            c.execute("INSERT INTO events (source, event_id, received_at, answer) VALUES (?, ?, ?, ?)",
                      (source, event_id, now, json.dumps(answer, sort_keys=True)))
        return answer

    def apply_sequence(self, scope: str, key: str, sequence: int, event_id: str, now: float) -> int | None:
        """Move ``key``'s applied sequence in ``scope`` to ``sequence`` if it is newer (or this same event's);
        return None when it moved, else the sequence already applied (the event is out of order)."""
        with self._tx() as c:
            row = c.execute("SELECT sequence, event_id FROM event_order WHERE scope = ? AND order_key = ?",
                            (scope, key)).fetchone()
            if row is None:
                c.execute("INSERT INTO event_order (scope, order_key, sequence, event_id, updated_at) "
                          "VALUES (?, ?, ?, ?, ?)", (scope, key, sequence, event_id, now))
                return None
            if row[1] == event_id:
                return None
            if int(row[0]) >= sequence:
                return int(row[0])
            c.execute("UPDATE event_order SET sequence = ?, event_id = ?, updated_at = ? "
                      "WHERE scope = ? AND order_key = ?", (sequence, event_id, now, scope, key))
        return None
