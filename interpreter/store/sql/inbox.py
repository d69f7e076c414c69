"""The event inbox in SQL (:mod:`sealflow.store.inbox`), shared by both backends."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.inbox import FIND_LIMIT, WAITING_PAGE, InboxEvent
from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS event_inbox (
  tenant TEXT NOT NULL, source TEXT NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL,
  received_at REAL NOT NULL, PRIMARY KEY (tenant, source, event_id));
CREATE INDEX IF NOT EXISTS event_inbox_type ON event_inbox(tenant, type, received_at);
CREATE INDEX IF NOT EXISTS event_inbox_received ON event_inbox(received_at);
"""

PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS event_inbox (
  tenant TEXT NOT NULL, source TEXT NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL,
  received_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, source, event_id));
CREATE INDEX IF NOT EXISTS event_inbox_type ON event_inbox(tenant, type, received_at);
CREATE INDEX IF NOT EXISTS event_inbox_received ON event_inbox(received_at);
"""


class InboxMixin:
    """Expects ``_tx`` and ``_read`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def inbox_put(self, event: InboxEvent) -> bool:
        with self._tx() as c:
            cur = c.execute("INSERT INTO event_inbox (tenant, source, event_id, type, data, received_at) "
                            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, source, event_id) DO NOTHING",
                            (event.tenant, event.source, event.id, event.type,
                             json.dumps(event.data, sort_keys=True), event.received_at))
            return bool(cur.rowcount)

    def inbox_find(self, tenant: str, type: str, source: str | None, since: float,
                   limit: int = FIND_LIMIT) -> list[InboxEvent]:
        sql = ("SELECT tenant, source, event_id, type, data, received_at FROM event_inbox "
               "WHERE tenant = ? AND type = ? AND received_at >= ?")
        args: tuple[Any, ...] = (tenant, type, since)
        if source is not None:
            sql += " AND source = ?"
            args += (source,)
        rows = self._read(sql + " ORDER BY received_at, event_id LIMIT ?", (*args, limit))
        return [InboxEvent(r[0], r[1], r[2], r[3], json.loads(r[4]), float(r[5])) for r in rows]

    def inbox_waiting(self, tenant: str, type: str, *, after: str = "", limit: int = WAITING_PAGE
                      ) -> list[tuple[str, str]]:
        # the waiting attempt is the run's cursor; its data (compact JSON) names the event type it waits for
        like = '%"event":' + json.dumps(type).replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
        rows = self._read("SELECT r.id, a.step_id FROM runs r JOIN attempts a ON a.run_id = r.id "
                          "AND a.step_id = r.cursor_step AND a.attempt = r.cursor_attempt WHERE r.tenant = ? "
                          "AND r.state = 'waiting' AND a.state = 'waiting' AND a.data LIKE ? ESCAPE '!' "
                          "AND r.id > ? ORDER BY r.id LIMIT ?", (tenant, like, after, limit))
        return [(str(r[0]), str(r[1])) for r in rows]

    def inbox_prune(self, before: float) -> int:
        with self._tx() as c:
            return int(c.execute("DELETE FROM event_inbox WHERE received_at < ?", (before,)).rowcount)
