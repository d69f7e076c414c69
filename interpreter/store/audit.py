"""The audit log (one aggregate of the store): append-only, hash-chained per tenant in the transaction that
appends each event (:mod:`sealflow.store.auditchain`), verified by :mod:`sealflow.store.auditverify`."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sealflow.store.records import AuditEvent, AuditRecord


@runtime_checkable
class AuditLog(Protocol):
    """Append an event, read events back, read a tenant's chain to verify it."""

    def append_audit(self, event: AuditEvent, now: float) -> None:
        """Append one event that goes with no state change (e.g. a fenced-off commit)."""

    def audit(self, run_id: str | None = None, *, limit: int | None = None,
              event: str | None = None, after: int | None = None) -> list[AuditRecord]:
        """Audit events, oldest first: of run ``run_id`` (None: every run's), only those called ``event``, only
        those appended after the event of id ``after``."""

    def audit_last_id(self) -> int:
        """The id of the newest audit event (0: none): where a reader of events from now on starts."""

    def audit_chain(self, tenant: str | None) -> list[tuple[Any, ...]]:
        """A tenant's audit events in append order, as
        :data:`sealflow.store.auditchain.VERIFY_COLS` tuples."""

    def audit_heads(self) -> dict[str, tuple[int, str]]:
        """Tenant -> (seq, hash) of its chain's last event, as recorded when it was appended."""

    def audit_snapshot(self, tenant: str | None) -> tuple[tuple[int, str] | None, list[tuple[Any, ...]]]:
        """A tenant's head (None: none) and its chain (as :meth:`audit_chain`), read at one moment: on a live
        store, what workers append meanwhile is in neither (read apart, a chain read after its head holds
        events the head does not, and looks cut)."""

    def audit_tenants(self) -> list[str | None]:
        """Every tenant with audit events (None for events that name no tenant)."""
