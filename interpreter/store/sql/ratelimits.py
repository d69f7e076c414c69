"""Per-model rate limits in the store (a mixin of :class:`SqliteStore`, and so of the PostgreSQL store).

Table ``rate_limits`` holds one row per limited model (the lock every taker of that model goes
through) with the running totals of its grants (``requests``, ``tokens``); ``rate_grants`` holds the
calls granted, each with its tokens (the worst case when granted, the real figure once settled). The
totals are always the count and the token sum of the model's rows in ``rate_grants``: triggers move them
in the same transaction as any statement that adds, changes or removes a grant (see :data:`TOTALS_SQLITE`),
so a take costs the same whatever ``requests_per_minute`` is (it used to count the window's grants at
every call: a few thousand rows under the writers' lock at a high limit).

:meth:`rate_take` removes the model's grants that left the window (moving the totals), compares the
totals with the limit and records the grant in one transaction: on SQLite ``BEGIN IMMEDIATE`` (one
writer at a time), on PostgreSQL a writer's transaction (serial, under the writers' lock) that first
locks the model's row ``FOR UPDATE`` and stamps ``now`` on the database clock. Only a call that does
not fit reads grants, to say when it would (:func:`sealflow.core.ratelimits.free_at`; for a
limit of requests alone, the one grant whose leaving makes room). So the processes sharing a store, on
any number of hosts, together never pass a limit.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.core import ratelimits as rules
from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE rate_limits (model TEXT PRIMARY KEY, updated_at REAL NOT NULL);
CREATE TABLE rate_grants (
  key TEXT PRIMARY KEY, model TEXT NOT NULL, at REAL NOT NULL, tokens INTEGER NOT NULL
);
CREATE INDEX rate_grants_model ON rate_grants (model, at);
"""
PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION").replace("INTEGER", "BIGINT")


#: the running totals (schema migration 19 on SQLite, 18 on PostgreSQL): ``requests`` and ``tokens`` of a
#: model's ``rate_limits`` row are the count and the token sum of its ``rate_grants`` rows, kept so by triggers
#: on every insert, delete and change of a grant (whoever writes it: a worker of an older sealflow still running
#: during an upgrade, which knows nothing of the totals, keeps them right too); removing a model's row removes
#: its grants, so no grant outlives its row and its totals
TOTALS_SQLITE = """
ALTER TABLE rate_limits ADD COLUMN requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rate_limits ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER rate_grants_added AFTER INSERT ON rate_grants BEGIN
  INSERT OR IGNORE INTO rate_limits (model, updated_at) VALUES (NEW.model, NEW.at);
  UPDATE rate_limits SET requests = requests + 1, tokens = tokens + NEW.tokens WHERE model = NEW.model;
END;
CREATE TRIGGER rate_grants_removed AFTER DELETE ON rate_grants BEGIN
  UPDATE rate_limits SET requests = requests - 1, tokens = tokens - OLD.tokens WHERE model = OLD.model;
END;
CREATE TRIGGER rate_grants_changed AFTER UPDATE OF model, tokens ON rate_grants BEGIN
  UPDATE rate_limits SET requests = requests - 1, tokens = tokens - OLD.tokens WHERE model = OLD.model;
  INSERT OR IGNORE INTO rate_limits (model, updated_at) VALUES (NEW.model, NEW.at);
  UPDATE rate_limits SET requests = requests + 1, tokens = tokens + NEW.tokens WHERE model = NEW.model;
END;
CREATE TRIGGER rate_limits_removed AFTER DELETE ON rate_limits BEGIN
  DELETE FROM rate_grants WHERE model = OLD.model;
END;
"""
TOTALS_PG = """
ALTER TABLE rate_limits ADD COLUMN IF NOT EXISTS requests BIGINT NOT NULL DEFAULT 0;
ALTER TABLE rate_limits ADD COLUMN IF NOT EXISTS tokens BIGINT NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION sealflow_rate_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    UPDATE rate_limits SET requests = requests - 1, tokens = tokens - OLD.tokens WHERE model = OLD.model;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO rate_limits (model, updated_at) VALUES (NEW.model, NEW.at) ON CONFLICT DO NOTHING;
    UPDATE rate_limits SET requests = requests + 1, tokens = tokens + NEW.tokens WHERE model = NEW.model;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER rate_grants_totals AFTER INSERT OR DELETE OR UPDATE OF model, tokens ON rate_grants
  FOR EACH ROW EXECUTE FUNCTION sealflow_rate_totals();
CREATE OR REPLACE FUNCTION sealflow_rate_limit_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM rate_grants WHERE model = OLD.model;
  RETURN NULL;
END $$;
CREATE TRIGGER rate_limits_removed AFTER DELETE ON rate_limits FOR EACH ROW
  EXECUTE FUNCTION sealflow_rate_limit_removed();
"""
#: the totals of the grants already there (both backends, after the triggers exist), and a row for a model with
#: grants but none
TOTALS_BACKFILL = """
INSERT INTO rate_limits (model, updated_at) SELECT model, MAX(at) FROM rate_grants
  WHERE model NOT IN (SELECT model FROM rate_limits) GROUP BY model;
UPDATE rate_limits SET requests = (SELECT COUNT(*) FROM rate_grants g WHERE g.model = rate_limits.model),
  tokens = (SELECT COALESCE(SUM(g.tokens), 0) FROM rate_grants g WHERE g.model = rate_limits.model);
"""


class RateLimitsMixin:
    #: how the model's row is locked (PostgreSQL: ``FOR UPDATE``; SQLite has one writer at a time)
    _LOCK_LIMIT = ""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def rate_take(self, model: str, key: str, now: float, limit: rules.Limit, tokens: int) -> float | None:
        """Grant call ``key`` of ``tokens`` (its worst case) to ``model`` at ``now`` unless it would pass
        ``limit``: None when granted (recorded), else when it would fit (nothing is written then)."""
        edge = now - limit.window
        tokens = max(0, int(tokens))  # (a negative count, from a provider of one's own, would free capacity)
        with self._tx() as c:
            c.execute("INSERT INTO rate_limits (model, updated_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (model, now))
            # the model's row, locked, with its totals and the part of them that left the window (few grants:
            # each leaves once)
            count, used, gone, gone_tokens = c.execute(
                "SELECT requests, tokens, (SELECT COUNT(*) FROM rate_grants WHERE model = ? AND at <= ?), "
                "(SELECT COALESCE(SUM(tokens), 0) FROM rate_grants WHERE model = ? AND at <= ?) FROM rate_limits "
                "WHERE model = ?" + self._LOCK_LIMIT, (model, edge, model, edge, model)).fetchone()
            count, used = int(count) - int(gone), int(used) - int(gone_tokens)
            if ((limit.requests is not None and count + 1 > limit.requests)
                    or (limit.tokens is not None and used + tokens > limit.tokens)):
                wait = self._rate_free_at(c, model, now, limit, tokens, count)
                if wait is not None:
                    return wait
            if gone:  # (the triggers take them out of the totals, as they add the new grant below)
                c.execute("DELETE FROM rate_grants WHERE model = ? AND at <= ?", (model, edge))
            c.execute("DELETE FROM rate_grants WHERE key = ?", (key,))  # the same call taken again: its old grant
            c.execute("INSERT INTO rate_grants (key, model, at, tokens) VALUES (?, ?, ?, ?)", (key, model, now, tokens))
            c.execute("UPDATE rate_limits SET updated_at = ? WHERE model = ?", (now, model))
        return None

    @staticmethod
    def _rate_free_at(c: Conn, model: str, now: float, limit: rules.Limit, tokens: int, count: int) -> float | None:
        """When a call that does not fit by the live totals (``count`` grants in the window) would."""
        edge = now - limit.window
        if limit.tokens is None and limit.requests is not None:  # requests alone: the grant whose leaving frees
            leave = count + 1 - limit.requests
            got = c.execute("SELECT at FROM rate_grants WHERE model = ? AND at > ? ORDER BY at LIMIT 1 OFFSET ?",
                            (model, edge, leave - 1)).fetchone()
            return None if got is None else float(got[0]) + limit.window
        live = [(float(at), int(t)) for at, t in
                c.execute("SELECT at, tokens FROM rate_grants WHERE model = ? AND at > ?", (model, edge)).fetchall()]
        return rules.free_at(live, now, limit, tokens)

    def rate_settle(self, key: str, tokens: int) -> bool:
        """Lower grant ``key``'s tokens to what the call really used (never raise them); False if gone."""
        used = max(0, int(tokens))  # never below nothing: the totals would count capacity that is not there
        with self._tx() as c:
            return c.execute("UPDATE rate_grants SET tokens = CASE WHEN ? < tokens THEN ? ELSE tokens END "
                             "WHERE key = ?", (used, used, key)).rowcount > 0

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
