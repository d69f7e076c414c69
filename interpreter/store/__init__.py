"""The state store: the single source of truth of every run (see :mod:`.base` for the contract).

``open_store(url)`` opens a backend by URL; with no URL it reads ``SEALFLOW_STORE``,
else uses the embedded default ``sqlite:///.sealflow/state.db``. ``postgresql://...`` opens the
PostgreSQL store (:mod:`sealflow.store.postgres`).
"""

from __future__ import annotations

import os

from sealflow.core.clock import Clock
from sealflow.store.base import (
    AttemptRecord,
    AuditEvent,
    AuditRecord,
    Claimed,
    Commit,
    Committed,
    DeadLetterRecord,
    DeadLetterSpec,
    LedgerEntry,
    LedgerRecord,
    Message,
    NewRun,
    NextAttempt,
    OutboxRecord,
    RunChange,
    RunRecord,
    StepChange,
    Store,
    SweepReport,
    TimerRecord,
)
from sealflow.store.errors import (
    AdmissionRefused,
    ClaimDeferred,
    ConcurrencyError,
    FencingError,
    IdempotencyConflict,
    IllegalTransition,
    InvalidOperation,
    MessageRefused,
    NotFound,
    SchemaTooNew,
    StoreError,
    StoreUnavailable,
    StoreURLError,
)

DEFAULT_URL = "sqlite:///.sealflow/state.db"


def open_store(url: str | None = None, *, migrate: bool = False, clock: Clock | None = None) -> Store:
    """Open the store at ``url``: ``sqlite:///PATH`` (``sqlite:////abs/path``, ``sqlite:///:memory:``) or
    ``postgresql://user:pass@host:5432/db`` (parameters: :mod:`sealflow.store.postgres.store`).

    A SQLite file is migrated on open, as always. A PostgreSQL database shared by many processes is
    migrated only when asked: ``migrate=True`` (a worker started with migration on), or
    :func:`migrate_store` (``sealflow store migrate``); otherwise an older schema is refused.

    ``clock``: the clock the store stamps what it records with (None: the system's), given once here: the
    store's methods take no ``now`` where they can read it (``Store.clock``; a :class:`~sealflow.runtime.facade.
    Runtime` on the store keeps time on the same clock)."""
    url = url or os.environ.get("SEALFLOW_STORE") or DEFAULT_URL
    if url.startswith("sqlite:///"):
        from sealflow.store.sqlite.store import SqliteStore

        path = url[len("sqlite:///"):]
        if not path:
            raise StoreURLError(f"store URL {url!r} names no file; write sqlite:///.sealflow/state.db")
        return SqliteStore(path, clock=clock)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from sealflow.store.postgres import PostgresStore
        except ImportError as exc:  # psycopg is a dependency; a broken install says so
            raise StoreURLError(f"cannot open {url.split('@')[-1]!r}: the PostgreSQL driver is not installed "
                                f"({exc}); pip install 'psycopg[binary]' psycopg-pool") from None
        return PostgresStore(url, migrate=migrate or None, clock=clock)
    if url.startswith(("redis://", "rediss://")):
        raise StoreURLError(f"the Redis store is not available in this build ({url!r}); use sqlite:///PATH, "
                            "or unset SEALFLOW_STORE for the embedded default")
    raise StoreURLError(f"unknown store URL {url!r}; use sqlite:///PATH (e.g. {DEFAULT_URL}) or "
                        "postgresql://user:pass@host:5432/db")


def migrate_store(url: str | None = None) -> tuple[int, list[int]]:
    """Apply the store's missing schema migrations (idempotent): (the version it is at, the versions applied).
    What ``sealflow store migrate --store URL`` runs."""
    url = url or os.environ.get("SEALFLOW_STORE") or DEFAULT_URL
    if url.startswith(("postgresql://", "postgres://")):
        from sealflow.store.postgres import LATEST, migrate

        return LATEST, migrate(url)
    store = open_store(url)  # SQLite migrates on open
    try:
        return store.schema_version(), []
    finally:
        store.close()


__all__ = [
    "open_store", "migrate_store", "DEFAULT_URL", "Store", "Message", "RunRecord", "AttemptRecord", "Claimed", "NewRun",
    "StepChange",
    "NextAttempt", "RunChange", "LedgerEntry", "DeadLetterSpec", "AuditEvent", "Commit", "Committed", "SweepReport",
    "TimerRecord", "OutboxRecord", "LedgerRecord", "DeadLetterRecord", "AuditRecord", "StoreError", "StoreURLError",
    "SchemaTooNew", "NotFound", "FencingError", "ConcurrencyError", "IllegalTransition", "IdempotencyConflict",
    "MessageRefused", "InvalidOperation", "AdmissionRefused", "ClaimDeferred", "StoreUnavailable",
]
