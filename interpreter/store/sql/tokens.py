"""API tokens in the store (``sealflow tokens``, the HTTP API's bearer tokens): created, looked up,
listed and revoked. Only a hash of each token's secret is stored; creating and revoking are audited.

Shared by both backends (the PostgreSQL store runs this SQL through its dialect).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sealflow.store.errors import InvalidOperation
from sealflow.store.records import ApiTokenRecord
from sealflow.store.sql.conn import Conn, Row

_COLS = "id, principal, tenant, created_at, created_by, expires_at, revoked_at, label, secret_hash"

SCHEMA = """
CREATE TABLE IF NOT EXISTS api_tokens (
  id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, principal TEXT NOT NULL, tenant TEXT NOT NULL,
  created_at REAL NOT NULL, created_by TEXT NOT NULL, expires_at REAL, revoked_at REAL, label TEXT);
CREATE INDEX IF NOT EXISTS api_tokens_tenant ON api_tokens(tenant, created_at);
CREATE INDEX IF NOT EXISTS runs_tenant_created ON runs(tenant, created_at, id);
"""


def _record(row: Row) -> ApiTokenRecord:
    return ApiTokenRecord(*row)


class TokensMixin:
    """Expects ``_tx``, ``_read`` and ``_audit`` from the store."""

    if TYPE_CHECKING:  # the store's (sealflow.store.sql.store)
        def _tx(self) -> AbstractContextManager[Conn]: ...
        def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
        def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str,
                   actor: str = "system", before: str | None = None, after: str | None = None,
                   detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None) -> None: ...

    def create_api_token(self, token: ApiTokenRecord, now: float) -> ApiTokenRecord:
        with self._tx() as c:
            c.execute(f"INSERT INTO api_tokens ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?)",
                      (token.id, token.principal, token.tenant, token.created_at, token.created_by,
                       token.expires_at, token.revoked_at, token.label, token.secret_hash))
            self._audit(c, now, None, None, "api_token.created", token.created_by, None, None,
                        {"token": token.id, "principal": token.principal, "tenant": token.tenant,
                         "expires_at": token.expires_at}, chain={"tenant": token.tenant})
        return token

    def api_token(self, token_id: str) -> ApiTokenRecord | None:
        got = self._read(f"SELECT {_COLS} FROM api_tokens WHERE id = ?", (token_id,))
        return _record(got[0]) if got else None

    def api_tokens(self, tenant: str | None = None) -> list[ApiTokenRecord]:
        where, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        return [_record(r) for r in self._read(f"SELECT {_COLS} FROM api_tokens {where} ORDER BY created_at, id",
                                               args)]

    def revoke_api_token(self, token_id: str, now: float, *, actor: str) -> ApiTokenRecord:
        with self._tx() as c:
            row = c.execute("SELECT tenant, revoked_at FROM api_tokens WHERE id = ?", (token_id,)).fetchone()
            if row is None:
                raise InvalidOperation(f"no API token {token_id!r} in this store; see `sealflow tokens list`")
            if row[1] is None:
                c.execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ?", (now, token_id))
                self._audit(c, now, None, None, "api_token.revoked", actor, None, None, {"token": token_id},
                            chain={"tenant": row[0]})
        got = self.api_token(token_id)
        assert got is not None
        return got
