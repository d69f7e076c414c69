"""The server's sign-in state on PostgreSQL (:mod:`sealflow.store.sql.sessions`), with every
time stamped on the database's clock (``clock=db``): a session started by a server on one host expires at
the same moment for a server on another, whatever their clocks say."""

from __future__ import annotations

import dataclasses

from sealflow.store.sql.sessions import RATE_PREFIX, SessionRow, SessionsMixin


class PgSessionsMixin(SessionsMixin):
    """Shifts the caller's times onto the database clock (``_on_db_clock`` of the PostgreSQL store)."""

    def _on_db_clock(self, now: float) -> tuple[float, float]:
        raise NotImplementedError  # pragma: no cover - the PostgreSQL store defines it

    def session_put(self, row: SessionRow, *, sweep: int = 100) -> None:
        _, shift = self._on_db_clock(row.started_at)
        if shift:
            row = dataclasses.replace(row, started_at=row.started_at + shift, used_at=row.used_at + shift,
                                      expires_at=row.expires_at + shift)
        super().session_put(row, sweep=sweep)

    def session_get(self, id_hash: str, now: float, *, touch_after: float = 60.0) -> SessionRow | None:
        return super().session_get(id_hash, self._on_db_clock(now)[0], touch_after=touch_after)

    def oidc_login_put(self, state_hash: str, nonce: str, verifier: str, now: float, expires_at: float, *,
                       sweep: int = 100) -> None:
        db, shift = self._on_db_clock(now)
        super().oidc_login_put(state_hash, nonce, verifier, db, expires_at + shift, sweep=sweep)

    def oidc_login_spend(self, state_hash: str, now: float) -> tuple[str, str] | None:
        return super().oidc_login_spend(state_hash, self._on_db_clock(now)[0])

    def server_sweep(self, now: float, rate_window: float, limit: int = 500, *,
                     rate_prefix: str = RATE_PREFIX) -> int:
        return super().server_sweep(self._on_db_clock(now)[0], rate_window, limit, rate_prefix=rate_prefix)
