"""The state store interface: the single source of truth of every run.

:class:`Store` is the composition of the runtime's aggregates, each a narrow :class:`typing.Protocol` of its
own module: the run ledger (:class:`~sealflow.store.ledger.RunLedger`: submit, claim, commit, the outbox,
timers, sweeps), its reads (:class:`~sealflow.store.runs.RunReads`), the audit log
(:class:`~sealflow.store.audit.AuditLog`), the definition registry
(:class:`~sealflow.store.definitions.DefinitionRegistry`), limits (:class:`~sealflow.store.limits.Limits`:
usage, rate limits, breakers, slots) and notification deliveries
(:class:`~sealflow.store.deliveries.Deliveries`). A consumer that uses one aggregate is typed against that
one. The server's own state (API tokens, sessions, OIDC logins) is not the runtime's: it is
:class:`~sealflow.store.serverstate.ServerStore`. Optional capabilities are :mod:`.capabilities`.

Every method that changes state is ONE atomic operation (a SQLite ``BEGIN
IMMEDIATE`` transaction; on Redis, one Lua script or MULTI/WATCH block), and
every change that involves a step attempt is fenced by that attempt's token:

* a message ``(run_id, step_id, attempt, token)`` is honoured only by
  :meth:`Store.claim`, which compares the token and the attempt's state and
  issues a *new* token (compare-and-set); anything else is refused and audited
  as ``message_refused``;
* :meth:`Store.commit` applies a step's result, the run's new state, counters,
  the idempotency ledger entry, the dead letter, the next attempt (with its
  outbox row or timer) and the audit events together, or nothing: a stale
  token raises :class:`FencingError`, a stale run revision
  :class:`ConcurrencyError`, an edge not in :mod:`sealflow.core.states`
  :class:`IllegalTransition` (audited, not applied).

Invariants the engine relies on (kept by these operations, checked by tests):

1. A run in ``queued``/``running``/``waiting``/``cancelling`` has exactly one
   *active* attempt (``scheduled``, ``running``, ``retry_wait`` or
   ``waiting``): its cursor.
2. A ``scheduled`` attempt has an outbox row until a worker claims it; a
   ``retry_wait`` attempt has a ``backoff`` timer; a ``waiting`` attempt has a
   ``wait`` or ``approval_timeout`` timer, or waits for a human with one; a
   ``running`` attempt has a lease that the sweeper expires.
3. The audit log is append-only; nothing updates or deletes it; each event is
   hash-chained to its tenant's previous one in the transaction that appends it
   (:mod:`sealflow.store.auditchain`).

So a process killed at any instant leaves the store in a state from which the
sweeper and :meth:`Store.reset_dispatch` alone drive every run on.

Values that are JSON in the store (inputs, outputs, results) cross this
interface as JSON *text* (``*_json`` fields) so the engine encodes once and the
backend stores strings as they are; records read back are decoded.
"""

from __future__ import annotations

import inspect
from typing import Protocol, runtime_checkable

from sealflow.core.clock import Clock
from sealflow.store.audit import AuditLog
from sealflow.store.definitions import DefinitionRegistry
from sealflow.store.deliveries import Deliveries, DeliveryRecord, NewDelivery  # re-exported (__all__)
from sealflow.store.inbox import EventInbox, InboxEvent
from sealflow.store.ledger import RunLedger
from sealflow.store.limits import Limits
from sealflow.store.records import (  # re-exported (__all__): the records are part of the interface
    ApiTokenRecord,
    AttemptRecord,
    AuditEvent,
    AuditRecord,
    ChildRecord,
    ChildSpec,
    Claimed,
    Commit,
    Committed,
    DeadLetterRecord,
    DeadLetterSpec,
    Due,
    LedgerEntry,
    LedgerRecord,
    Message,
    NewRun,
    NextAttempt,
    OutboxRecord,
    RunChange,
    RunQuery,
    RunRecord,
    Spawn,
    StepChange,
    SweepReport,
    TimerRecord,
)
from sealflow.store.runs import RunReads
from sealflow.store.serverstate import ServerStore

#: the runtime's aggregates, of which :class:`Store` is the composition
AGGREGATES: tuple[type, ...] = (RunLedger, RunReads, AuditLog, DefinitionRegistry, Limits, Deliveries, EventInbox)
#: every store protocol a backend implements: the runtime's aggregates and the server's own store
PROTOCOLS: tuple[type, ...] = (*AGGREGATES, ServerStore)


@runtime_checkable
class Store(RunLedger, RunReads, AuditLog, DefinitionRegistry, Limits, Deliveries, EventInbox, Protocol):
    """The runtime's store: every aggregate of :data:`AGGREGATES` on one backend, and its lifecycle. Every
    mutating method is one atomic operation. It declares nothing of its own besides the lifecycle below."""

    url: str
    #: the clock the store stamps what it records with, given once when it is opened (``open_store(url,
    #: clock=...)``); a method that can read it takes no ``now``
    clock: Clock
    #: whether a caller waiting for a run should ride out this store's outages (a server that restarts or fails
    #: over comes back: PostgreSQL) rather than fail at once (a local file's disk full or read-only: SQLite)
    rides_out_outages: bool

    def close(self) -> None:
        """Release the store's connections (and stop its background threads)."""

    def schema_version(self) -> int:
        """The schema version the store is at."""


def methods(protocol: type) -> frozenset[str]:
    """The public methods ``protocol`` declares (with those of the protocols it inherits)."""
    return frozenset(name for klass in protocol.__mro__ if klass not in (Protocol, object)
                     and getattr(klass, "_is_protocol", False)
                     for name, member in vars(klass).items()
                     if not name.startswith("_") and inspect.isfunction(member))


def operations() -> frozenset[str]:
    """Every public method of every store protocol (:data:`PROTOCOLS`): what a backend implements."""
    return frozenset().union(*(methods(p) for p in PROTOCOLS))


#: the module's own names and those it re-exports
__all__ = [
    "AGGREGATES", "PROTOCOLS", "Store", "methods", "operations", "Deliveries", "DeliveryRecord", "NewDelivery",
    "EventInbox", "InboxEvent",
    "ApiTokenRecord", "AttemptRecord", "AuditEvent", "AuditRecord", "ChildRecord", "ChildSpec", "Claimed", "Commit",
    "Committed", "DeadLetterRecord", "DeadLetterSpec", "Due", "LedgerEntry", "LedgerRecord", "Message", "NewRun",
    "NextAttempt", "OutboxRecord", "RunChange", "RunQuery", "RunRecord", "Spawn", "StepChange", "SweepReport",
    "TimerRecord",
]
