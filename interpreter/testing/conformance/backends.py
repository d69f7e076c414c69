"""The repository's backends satisfy every store protocol: a check at the type level.

mypy reads these functions (``python tools/typecheck.py``; this module is checked strictly, pyproject.toml): each
returns a backend as every protocol of :data:`sealflow.store.base.PROTOCOLS`, which mypy accepts only if the
backend's methods match each protocol's, name and signature (the backends do not subclass the protocols, so
the match is structural, not declared). At run time they are the identity (the tests call them too).
"""

from __future__ import annotations

from sealflow.store.audit import AuditLog
from sealflow.store.base import Store
from sealflow.store.definitions import DefinitionRegistry
from sealflow.store.deliveries import Deliveries
from sealflow.store.ledger import RunLedger
from sealflow.store.limits import Limits
from sealflow.store.postgres.store import PostgresStore
from sealflow.store.runs import RunReads
from sealflow.store.serverstate import ServerStore, SignedEvents
from sealflow.store.sqlite.store import SqliteStore

Everything = tuple[Store, RunLedger, RunReads, AuditLog, DefinitionRegistry, Limits, Deliveries, ServerStore,
                   SignedEvents]


def _each(store: SqliteStore | PostgresStore) -> Everything:
    # one assignment per protocol, so that mypy names the protocol and the member that does not match
    runtime: Store = store
    ledger: RunLedger = store
    reads: RunReads = store
    audit: AuditLog = store
    registry: DefinitionRegistry = store
    limits: Limits = store
    deliveries: Deliveries = store
    server: ServerStore = store
    events: SignedEvents = store
    return runtime, ledger, reads, audit, registry, limits, deliveries, server, events


def sqlite_conforms(store: SqliteStore) -> Everything:
    """The SQLite store as every store protocol (mypy checks that it is each)."""
    return _each(store)


def postgres_conforms(store: PostgresStore) -> Everything:
    """The PostgreSQL store as every store protocol (mypy checks that it is each)."""
    return _each(store)
