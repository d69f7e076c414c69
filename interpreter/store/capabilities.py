"""Optional store capabilities: declared as protocols, decided once when the engine is built.

The :class:`~sealflow.store.base.Store` contract is what every backend implements. A few things
only some backends can do; each is a :class:`typing.Protocol` here, and :meth:`Capabilities.of` checks a store
against all of them once (``Engine`` does it when it builds its ``Services``; the runtime reads the same
record as ``Runtime.capabilities``). Callers ask that record, never the store with ``hasattr``:

=========================  ===================================================  =================  ==========
capability                 what it is for                                       SQLite             PostgreSQL
=========================  ===================================================  =================  ==========
:class:`Heartbeats`        workers beat; a silent one loses its leases on any    no (pid on this    yes
                           machine, and its fetched Redis messages are requeued  host instead)
:class:`WorkNotification`  the worker loop wakes when work is written            no (it polls)      yes
:class:`UsageReservations` a model call reserves its worst case against the      yes                yes
                           tenant's daily quota before it is made
:class:`SqlReads`          raw ``SELECT`` reads (the metrics' run counts)         yes                yes
=========================  ===================================================  =================  ==========

A store without one behaves as before: it keeps no heartbeats (dead workers are judged by pid), the loop
polls, the quota counts only committed usage, the metrics leave out the run counts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Heartbeats(Protocol):
    """Worker liveness on the store's clock (the PostgreSQL store: :mod:`.postgres.workers`)."""

    def heartbeat(self, owner: str, broker_id: str | None = None) -> None:
        """Record that worker ``owner`` is alive (with its Redis broker id when given)."""

    def dead_workers(self, silent_for: float) -> list[str]:
        """Owners holding a lease whose last heartbeat is more than ``silent_for`` s old (or who never beat)."""

    def silent_brokers(self, silent_for: float) -> list[tuple[str, str]]:
        """``(owner, broker id)`` of the workers with a broker id silent for more than ``silent_for`` s."""

    def forget_broker(self, owner: str, broker_id: str) -> bool:
        """Mark ``owner``'s broker id handled (its messages were requeued)."""


@runtime_checkable
class WorkNotification(Protocol):
    """Wake-ups when work is written, from any process (PostgreSQL ``LISTEN``/``NOTIFY``)."""

    def wait_for_work(self, timeout: float) -> bool:
        """Block until new work is written or ``timeout`` s pass; True if woken."""


@runtime_checkable
class UsageReservations(Protocol):
    """Reservations of model usage against a tenant's daily quota (:mod:`.sql.reservations`)."""

    def reserve_usage(self, key: str, run_id: str, tenant: str, day: int, tokens: int, cost_usd: float, now: float,
                      expires_at: float, *, max_tokens: int | None, max_cost_usd: float | None
                      ) -> tuple[int, float] | None:
        """Reserve for attempt ``key`` unless it would pass a quota (None: reserved; else what is taken)."""

    def release_usage(self, key: str) -> None:
        """Drop attempt ``key``'s reservation."""

    def reserved_usage(self, tenant: str, day: int, now: float) -> tuple[int, float]:
        """The tokens and cost held by live reservations of ``tenant`` on ``day``."""


@runtime_checkable
class SqlReads(Protocol):
    """Raw ``SELECT`` reads on the store's database (an SQL backend's own reader)."""

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (``?`` placeholders) with ``args``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """Which optional capabilities a store has: each field is the store itself, typed as the capability, or
    None when it lacks it (``if (beats := caps.heartbeats) is not None: beats.heartbeat(owner)``)."""

    heartbeats: Heartbeats | None = None
    work_notification: WorkNotification | None = None
    usage_reservations: UsageReservations | None = None
    sql_reads: SqlReads | None = None

    @classmethod
    def of(cls, store: Any) -> Capabilities:
        """The capabilities ``store`` declares (implements every method of the protocol); checked now, once."""
        return cls(heartbeats=store if isinstance(store, Heartbeats) else None,
                   work_notification=store if isinstance(store, WorkNotification) else None,
                   usage_reservations=store if isinstance(store, UsageReservations) else None,
                   sql_reads=store if isinstance(store, SqlReads) else None)

    def names(self) -> tuple[str, ...]:
        """The names of the capabilities present (for logs and tests)."""
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None)

