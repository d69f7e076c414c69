"""The server's own store: what the HTTP API and the ``/ui`` pages keep, shared by every server process.

API tokens (their secrets' hashes), ``/ui`` sessions (their ids' hashes), OIDC logins started and not yet
finished, the server's own rate-limit grants (keys under :data:`RATE_PREFIX`), and signed events received
(:mod:`sealflow.server.events`). The runtime's :class:`~sealflow.store.base.Store` does not carry them: the
server reaches them through :class:`ServerStore` and :class:`SignedEvents`, which each backend also
implements (the shared SQL: :mod:`.sql.tokens`, :mod:`.sql.sessions`, :mod:`.sql.events`; PostgreSQL's
times on the database clock). :func:`server_store` types a store the server was handed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

from sealflow.core.ratelimits import Limit
from sealflow.store.errors import StoreError
from sealflow.store.records import ApiTokenRecord

#: the prefix of the server's rate-limit keys (never a model's name: those start with a letter or digit)
RATE_PREFIX = "@http:"


@dataclasses.dataclass(frozen=True)
class SessionRow:
    """A ``/ui`` session as the store keeps it: the hash of its id, never the id."""

    id_hash: str
    principal: str
    tenant: str
    method: str
    token_id: str | None
    csrf: str
    started_at: float
    used_at: float
    idle_s: float
    expires_at: float

    def live(self, now: float) -> bool:
        return self.used_at + self.idle_s > now and self.expires_at > now


@runtime_checkable
class ServerStore(Protocol):
    """API tokens, ``/ui`` sessions, OIDC logins and the server's request rate limits."""

    # -- API tokens (see :mod:`sealflow.store.sql.tokens`) ---------------------------------------------------
    def create_api_token(self, token: ApiTokenRecord, now: float) -> ApiTokenRecord:
        """Record a new token (its secret's hash only); audited as ``api_token.created``."""

    def api_token(self, token_id: str) -> ApiTokenRecord | None:
        """The token ``token_id`` (revoked and expired ones too), or None."""

    def api_tokens(self, tenant: str | None = None) -> list[ApiTokenRecord]:
        """Every token (of ``tenant``), oldest first; revoked and expired ones included."""

    def revoke_api_token(self, token_id: str, now: float, *, actor: str) -> ApiTokenRecord:
        """Revoke a token (again: nothing changes); an unknown id raises :class:`InvalidOperation`."""

    # -- sign-in state (see :mod:`sealflow.store.sql.sessions`) ----------------------------------------------
    def session_put(self, row: SessionRow, *, sweep: int = 100) -> None:
        """Record a new ``/ui`` session (its id's hash, never the id); sweep ended ones."""

    def session_get(self, id_hash: str, now: float, *, touch_after: float = 60.0) -> SessionRow | None:
        """The live session ``id_hash`` (its use recorded), or None."""

    def session_end(self, id_hash: str) -> bool:
        """End a session for every process (sign-out); False if it was not there."""

    def oidc_login_put(self, state_hash: str, nonce: str, verifier: str, now: float, expires_at: float, *,
                       sweep: int = 100) -> None:
        """Record a started OIDC login by its state's hash."""

    def oidc_login_spend(self, state_hash: str, now: float) -> tuple[str, str] | None:
        """``(nonce, verifier)`` of a started, unexpired login, deleted as read (spent once), else None."""

    # -- the server's request rate limits (the per-model tables, keys under RATE_PREFIX) -----------------------
    def rate_take(self, model: str, key: str, now: float, limit: Limit, tokens: int) -> float | None:
        """Grant call ``key`` against ``model``'s rate ``limit`` at ``now`` (None), else when it would fit."""

    def server_sweep(self, now: float, rate_window: float, limit: int = 500, *,
                     rate_prefix: str = RATE_PREFIX) -> int:
        """Remove up to ``limit`` ended sessions, expired logins and old server rate-limit grants."""


@runtime_checkable
class SignedEvents(Protocol):
    """Signed events received (``POST /v1/events/{source}``, see :mod:`sealflow.store.sql.events`)."""

    def event_answer(self, source: str, event_id: str) -> dict[str, Any] | None:
        """The answer recorded for event ``event_id`` of ``source`` (None: not seen)."""

    def record_event(self, source: str, event_id: str, answer: dict[str, Any], now: float) -> dict[str, Any]:
        """Record ``answer`` for the event unless one is recorded already; return the recorded (first) one."""

    def apply_sequence(self, scope: str, key: str, sequence: int, event_id: str, now: float) -> int | None:
        """Move ``key``'s applied sequence in ``scope`` to ``sequence`` if it is newer (or this same event's);
        return None when it moved, else the sequence already applied (the event is out of order)."""


def server_store(store: object) -> ServerStore:
    """``store`` typed as the server's store; a store that lacks it is refused with a clear error, once."""
    if not isinstance(store, ServerStore):
        raise StoreError(f"the store {getattr(store, 'url', type(store).__name__)!r} keeps no API tokens, sessions "
                         "or OIDC logins, which the HTTP server needs; serve on a sqlite:/// or postgresql:// store")
    return store
