"""Usage reservations: a model call's worst case held against the tenant's daily quota while it runs.

A mixin of :class:`SqliteStore` (and so of the PostgreSQL store). Before a model call the engine
*reserves* its worst case (``max_tokens`` and that many tokens at the model's price) in one
transaction that also reads the tenant's usage and every live reservation: the reservation is refused
when used + reserved + worst case would pass a quota, so concurrent calls cannot overshoot it together.
The step's commit charges the real usage and drops the attempt's reservation in the same transaction
(:mod:`sealflow.store.sql.steps`); a reservation whose attempt died expires at
``expires_at`` (the attempt's deadline plus a margin).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE usage_reservations (
  key TEXT PRIMARY KEY, run_id TEXT NOT NULL, tenant TEXT NOT NULL, day INTEGER NOT NULL,
  tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, expires_at REAL NOT NULL
);
CREATE INDEX usage_reservations_tenant ON usage_reservations (tenant, day);
"""
PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION")

#: the reservation of one attempt (``run:step:attempt``) is dropped by that attempt's commit
DROP = "DELETE FROM usage_reservations WHERE key = ?"


def key_of(run_id: str, step_id: str, attempt: int) -> str:
    return f"{run_id}:{step_id}:{attempt}"


class ReservationsMixin:
    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def reserve_usage(self, key: str, run_id: str, tenant: str, day: int, tokens: int, cost_usd: float, now: float,
                      expires_at: float, *, max_tokens: int | None, max_cost_usd: float | None
                      ) -> tuple[int, float] | None:
        """Reserve ``tokens``/``cost_usd`` for attempt ``key`` unless it would pass a quota; return None when
        reserved, else what is already used and reserved ``(tokens, cost)`` (nothing is written then)."""
        with self._tx() as c:
            got = c.execute("SELECT tokens, cost_usd FROM tenant_usage WHERE tenant = ? AND day = ?",
                            (tenant, day)).fetchone()
            used_t, used_c = (got[0], got[1]) if got else (0, 0.0)
            held = c.execute("SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0) FROM usage_reservations "
                             "WHERE tenant = ? AND day = ? AND key <> ? AND expires_at > ?",
                             (tenant, day, key, now)).fetchone()
            taken_t, taken_c = used_t + int(held[0]), used_c + float(held[1])
            if ((max_tokens is not None and taken_t + tokens > max_tokens)
                    or (max_cost_usd is not None and taken_c + cost_usd > max_cost_usd)):
                return taken_t, taken_c
            c.execute(DROP, (key,))
            c.execute("INSERT INTO usage_reservations (key, run_id, tenant, day, tokens, cost_usd, expires_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, run_id, tenant, day, tokens, cost_usd, expires_at))
            c.execute("DELETE FROM usage_reservations WHERE expires_at <= ?", (now,))
        return None

    def release_usage(self, key: str) -> None:
        """Drop attempt ``key``'s reservation (its commit does this itself; this is for a refused attempt)."""
        with self._tx() as c:
            c.execute(DROP, (key,))

    def reserved_usage(self, tenant: str, day: int, now: float) -> tuple[int, float]:
        """The tokens and cost held by live reservations of ``tenant`` on ``day``."""
        got = self._read("SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0) FROM usage_reservations "
                         "WHERE tenant = ? AND day = ? AND expires_at > ?", (tenant, day, now))
        return int(got[0][0]), float(got[0][1])
