"""The server's sign-in state in the store, shared by every server process (a mixin of :class:`SqliteStore`,
and so of the PostgreSQL store).

* ``ui_sessions``: one row per browser session of the ``/ui`` pages, keyed by a HASH of the session id
  (the id itself lives only in the browser's cookie), with its principal, tenant, sign-in method, the API
  token signed in with (its id), its CSRF secret, when it started, when it was last used, its idle limit
  and its absolute expiry. A session is live while ``used_at + idle_s > now`` and ``expires_at > now``.
* ``oidc_logins``: one row per OIDC login started and not yet finished, keyed by a HASH of its ``state``,
  with its nonce and PKCE verifier; :meth:`oidc_login_spend` deletes it as it reads it (spent once).

The per-principal and failed-authentication rate limits use the per-model rate limit tables
(:mod:`.ratelimits`) under keys prefixed ``@http:``; :meth:`server_sweep` removes their old grants.
Every sweep is bounded (``limit`` rows a call): it is run as new rows are written.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.serverstate import RATE_PREFIX, SessionRow
from sealflow.store.sql.conn import Conn, Row

SCHEMA = """
CREATE TABLE ui_sessions (
  id_hash TEXT PRIMARY KEY, principal TEXT NOT NULL, tenant TEXT NOT NULL, method TEXT NOT NULL,
  token_id TEXT, csrf TEXT NOT NULL, started_at REAL NOT NULL, used_at REAL NOT NULL,
  idle_s REAL NOT NULL, expires_at REAL NOT NULL
);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);
CREATE INDEX ui_sessions_used ON ui_sessions (used_at);
CREATE TABLE oidc_logins (
  state_hash TEXT PRIMARY KEY, nonce TEXT NOT NULL, verifier TEXT NOT NULL, started_at REAL NOT NULL,
  expires_at REAL NOT NULL
);
CREATE INDEX oidc_logins_expires ON oidc_logins (expires_at);
"""
PG_SCHEMA = SCHEMA.replace("REAL", "DOUBLE PRECISION")

__all__ = ["RATE_PREFIX", "SessionRow", "SessionsMixin"]

_COLS = "id_hash, principal, tenant, method, token_id, csrf, started_at, used_at, idle_s, expires_at"


class SessionsMixin:
    """Expects ``_tx`` and ``_read`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...

    def session_put(self, row: SessionRow, *, sweep: int = 100) -> None:
        """Record a new session (and remove up to ``sweep`` ended sessions and logins)."""
        with self._tx() as c:
            c.execute(f"INSERT INTO ui_sessions ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                      dataclasses.astuple(row))
            _sweep(c, row.started_at, sweep)

    def session_get(self, id_hash: str, now: float, *, touch_after: float = 60.0) -> SessionRow | None:
        """The live session ``id_hash`` (its last use moved to ``now`` when older than ``touch_after`` s);
        None when unknown, ended, idle too long or too old."""
        got = self._read(f"SELECT {_COLS} FROM ui_sessions WHERE id_hash = ?", (id_hash,))
        if not got:
            return None
        row = SessionRow(*got[0])
        if not row.live(now):
            return None
        if now - row.used_at >= touch_after:
            with self._tx() as c:
                if c.execute("UPDATE ui_sessions SET used_at = ? WHERE id_hash = ? AND used_at < ?",
                             (now, id_hash, now)).rowcount == 0 and not c.execute(
                        "SELECT 1 FROM ui_sessions WHERE id_hash = ?", (id_hash,)).fetchall():
                    return None  # ended meanwhile (signed out in another process)
            row = dataclasses.replace(row, used_at=now)
        return row

    def session_end(self, id_hash: str) -> bool:
        """End session ``id_hash`` in every process (sign-out); False if it was not there."""
        with self._tx() as c:
            return c.execute("DELETE FROM ui_sessions WHERE id_hash = ?", (id_hash,)).rowcount > 0

    def oidc_login_put(self, state_hash: str, nonce: str, verifier: str, now: float, expires_at: float, *,
                       sweep: int = 100) -> None:
        """Record a started OIDC login (and remove up to ``sweep`` ended sessions and logins)."""
        with self._tx() as c:
            c.execute("INSERT INTO oidc_logins (state_hash, nonce, verifier, started_at, expires_at) "
                      "VALUES (?,?,?,?,?)", (state_hash, nonce, verifier, now, expires_at))
            _sweep(c, now, sweep)

    def oidc_login_spend(self, state_hash: str, now: float) -> tuple[str, str] | None:
        """``(nonce, verifier)`` of the started login ``state_hash``, deleted as it is read: a second call
        (in any process) gets None, as does an unknown or expired login."""
        with self._tx() as c:
            got = c.execute("SELECT nonce, verifier, expires_at FROM oidc_logins WHERE state_hash = ?",
                            (state_hash,)).fetchall()
            if not got or c.execute("DELETE FROM oidc_logins WHERE state_hash = ?", (state_hash,)).rowcount != 1:
                return None
        nonce, verifier, expires_at = got[0]
        return (str(nonce), str(verifier)) if float(expires_at) > now else None

    def server_sweep(self, now: float, rate_window: float, limit: int = 500, *,
                     rate_prefix: str = RATE_PREFIX) -> int:
        """Remove up to ``limit`` ended sessions and expired logins, and up to ``limit`` keys of the server rate
        limits under ``rate_prefix`` idle for ``rate_window`` s (their grants go with them: a trigger, see
        :mod:`.ratelimits`; all older than the window, a key's last take being its newest grant); the sessions,
        logins and keys removed. A key still in use drops its own old grants at each take."""
        with self._tx() as c:
            gone = _sweep(c, now, limit)
            gone += c.execute("DELETE FROM rate_limits WHERE model IN (SELECT model FROM rate_limits WHERE model "
                              "LIKE ? AND updated_at <= ? LIMIT ?)",
                              (rate_prefix + "%", now - rate_window, limit)).rowcount
        return gone


def _sweep(c: Conn, now: float, limit: int) -> int:
    gone = c.execute("DELETE FROM ui_sessions WHERE id_hash IN (SELECT id_hash FROM ui_sessions WHERE "
                     "expires_at <= ? OR used_at + idle_s <= ? LIMIT ?)", (now, now, limit)).rowcount
    return gone + c.execute("DELETE FROM oidc_logins WHERE state_hash IN (SELECT state_hash FROM oidc_logins "
                            "WHERE expires_at <= ? LIMIT ?)", (now, limit)).rowcount
