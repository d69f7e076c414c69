"""The store's circuit breakers (a mixin of :class:`SqliteStore`, and so of the PostgreSQL store).

One row per breaker name in table ``breakers``; every read-decide-write is one transaction, so the
processes sharing a store share each breaker's state and a half-open breaker lets exactly one probe
through. The rules are :mod:`sealflow.core.breakers`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.core import breakers as rules
from sealflow.core.breakers import Admission, BreakerRecord, BreakerSettings
from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE breakers (
  name TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT 'closed', failures INTEGER NOT NULL DEFAULT 0,
  window_start REAL, opened_at REAL, probe_until REAL, last_error TEXT, updated_at REAL NOT NULL
);
"""
PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION")

_COLS = "name, state, failures, window_start, opened_at, probe_until, last_error, updated_at"


class BreakersMixin:
    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def _breaker_row(self, c: Conn, name: str) -> BreakerRecord | None:
        got = c.execute(f"SELECT {_COLS} FROM breakers WHERE name = ?", (name,)).fetchone()
        return None if got is None else BreakerRecord(*got)

    def _breaker_write(self, c: Conn, name: str, now: float, changes: dict[str, Any]) -> None:
        c.execute("INSERT INTO breakers (name, updated_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (name, now))
        cols = ", ".join(f"{k} = ?" for k in changes)
        c.execute(f"UPDATE breakers SET {cols}, updated_at = ? WHERE name = ?", (*changes.values(), now, name))

    def breaker_admit(self, name: str, now: float, settings: BreakerSettings) -> Admission:
        """May a call behind breaker ``name`` go through now? (open -> half-open takes the one probe)"""
        with self._tx() as c:
            admission, changes = rules.admit(self._breaker_row(c, name), now, settings)
            if changes:
                self._breaker_write(c, name, now, changes)
        return admission

    def breaker_record(self, name: str, now: float, settings: BreakerSettings, *, error_class: str | None,
                       probe: bool, message: str | None = None, called: bool = True) -> tuple[str, str]:
        """Record the end of a call; return the breaker's state before and after."""
        with self._tx() as c:
            rec = self._breaker_row(c, name)
            before = "closed" if rec is None else rec.state
            changes = rules.record(rec, now, settings, error_class=error_class, probe=probe,
                                   message=None if message is None else message[:500], called=called)
            if changes:
                self._breaker_write(c, name, now, changes)
        return before, (changes or {}).get("state", before)

    def breakers(self) -> list[BreakerRecord]:
        """Every breaker that has recorded something, by name."""
        return [BreakerRecord(*r) for r in self._read(f"SELECT {_COLS} FROM breakers ORDER BY name")]

    def breaker_reset(self, name: str, now: float) -> bool:
        """Close breaker ``name`` and forget its failures; False when there is no such breaker."""
        with self._tx() as c:
            return c.execute("UPDATE breakers SET state = 'closed', failures = 0, window_start = NULL, "
                             "opened_at = NULL, probe_until = NULL, updated_at = ? WHERE name = ?",
                             (now, name)).rowcount > 0
