"""Per-model rate limits in the store (a mixin of :class:`SqliteStore`, and so of the PostgreSQL store).

Table ``rate_limits`` holds one row per limited model (the lock every taker of that model goes
through); ``rate_grants`` holds the calls granted in the last window, each with its tokens (the worst
case when granted, the real figure once settled). :meth:`rate_take` reads the model's live grants,
decides with :func:`sealflow.interpreter.core.ratelimits.free_at` and records the grant in one
transaction: on SQLite ``BEGIN IMMEDIATE`` (one writer at a time), on PostgreSQL a writer's
transaction (serial, under the writers' lock) that first locks the model's row ``FOR UPDATE`` and
stamps ``now`` on the database clock.
So the processes sharing a store, on any number of hosts, together never pass a limit.
"""

from __future__ import annotations

from sealflow.interpreter.core import ratelimits as rules

SCHEMA = """
CREATE TABLE rate_limits (model TEXT PRIMARY KEY, updated_at REAL NOT NULL);
CREATE TABLE rate_grants (
  key TEXT PRIMARY KEY, model TEXT NOT NULL, at REAL NOT NULL, tokens INTEGER NOT NULL
);
CREATE INDEX rate_grants_model ON rate_grants (model, at);
"""
PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION").replace("INTEGER", "BIGINT")


class RateLimitsMixin:
    #: how the model's row is locked (PostgreSQL: ``FOR UPDATE``; SQLite has one writer at a time)
    _LOCK_LIMIT = ""

    def rate_take(self, model: str, key: str, now: float, limit: rules.Limit, tokens: int) -> float | None:
        """Grant call ``key`` of ``tokens`` (its worst case) to ``model`` at ``now`` unless it would pass
        ``limit``: None when granted (recorded), else when it would fit (nothing is written then)."""
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO rate_limits (model, updated_at) VALUES (?, ?)", (model, now))
            c.execute("SELECT model FROM rate_limits WHERE model = ?" + self._LOCK_LIMIT, (model,)).fetchone()
            c.execute("DELETE FROM rate_grants WHERE model = ? AND at <= ?", (model, now - limit.window))
            count, used = c.execute("SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM rate_grants WHERE model = ?",
                                    (model,)).fetchone()
            if ((limit.requests is not None and int(count) + 1 > limit.requests)
                    or (limit.tokens is not None and int(used) + tokens > limit.tokens)):
                live = [(float(at), int(t)) for at, t in
                        c.execute("SELECT at, tokens FROM rate_grants WHERE model = ?", (model,)).fetchall()]
                wait = rules.free_at(live, now, limit, tokens)
                if wait is not None:
                    return wait
            c.execute("DELETE FROM rate_grants WHERE key = ?", (key,))
            c.execute("INSERT INTO rate_grants (key, model, at, tokens) VALUES (?, ?, ?, ?)",
                      (key, model, now, int(tokens)))
            c.execute("UPDATE rate_limits SET updated_at = ? WHERE model = ?", (now, model))
        return None

    def rate_settle(self, key: str, tokens: int) -> bool:
        """Lower grant ``key``'s tokens to what the call really used (never raise them); False if gone."""
        with self._tx() as c:
            return c.execute("UPDATE rate_grants SET tokens = CASE WHEN ? < tokens THEN ? ELSE tokens END "
                             "WHERE key = ?", (int(tokens), int(tokens), key)).rowcount > 0

    def rate_release(self, key: str) -> bool:
        """Give grant ``key`` back whole, request and tokens: its call was not made (an open circuit breaker
        refused it); False if it is gone."""
        with self._tx() as c:
            return c.execute("DELETE FROM rate_grants WHERE key = ?", (key,)).rowcount > 0

    def rate_usage(self, model: str, now: float, window: float = rules.WINDOW_S) -> tuple[int, int]:
        """The requests and tokens granted to ``model`` in the window ending at ``now``."""
        got = self._read("SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM rate_grants WHERE model = ? AND at > ?",
                         (model, now - window))
        return int(got[0][0]), int(got[0][1])
