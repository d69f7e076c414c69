"""What callers above the runtime read and record through it (:class:`~sealflow.runtime.facade.Runtime`'s methods).

The server (HTTP API, pages, signed events) is a layer above the runtime and talks only to the facade: never to
the runtime's store or engine (``tests/test_layering.py`` checks it). What it used to reach past the facade for is
here: a page of a tenant's runs (authorised: the caller must be a member of the tenant), a run just submitted
(its initiator's), a plan by digest (verified, as the engine loads it), the definition registry's listings, an
audit event of the server's own (a sign-in, a refused token), whether the store answers, and typed views of the
server's own state (tokens, sessions, OIDC logins; signed events) and of the approval notifications.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.operations.notifications import admin
from sealflow.policy.authz import member_permissions
from sealflow.policy.operations import Operation, authorize_run
from sealflow.store.definitions import DefinitionRecord
from sealflow.store.deliveries import DeliveryRecord
from sealflow.store.errors import NotFound, StoreError
from sealflow.store.records import AuditEvent, RunQuery, RunRecord
from sealflow.store.serverstate import ServerStore, SignedEvents, server_store

#: the most items one read of a run's feed returns
FEED_BATCH = 200

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.dsl.plan import Plan
    from sealflow.engine.engine import Engine
    from sealflow.policy.access import AccessProvider
    from sealflow.store.base import Store


class Reading:
    """Methods of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:
        store: Store
        engine: Engine
        access: AccessProvider
        clock: Clock

    # -- runs ----------------------------------------------------------------------------------------
    def authorize(self, run_id: str, *, actor: str, tenant: str | None, operation: Operation | str) -> RunRecord:
        """The run, if ``actor`` may do ``operation`` to it and ``tenant`` (a claim) owns it; otherwise the answer
        for an unknown run (:class:`NotFound`), audited (:func:`sealflow.policy.operations.authorize_run`)."""
        return authorize_run(self.store, self.access, self.clock.now(), run_id, actor=actor, tenant=tenant,
                             operation=operation)

    def runs(self, query: RunQuery, *, actor: str) -> list[RunRecord]:
        """The runs ``query`` selects in its tenant, newest first; none unless ``actor`` is a member of that
        tenant (another tenant's runs look like none)."""
        _, member = member_permissions(self.access, query.tenant or "", actor)
        return self.store.query_runs(query) if member else []

    def run_counts(self, query: RunQuery, *, actor: str) -> dict[str, int]:
        """State -> how many runs ``query`` selects in its tenant whatever their state (none unless ``actor`` is
        a member of that tenant)."""
        _, member = member_permissions(self.access, query.tenant or "", actor)
        return self.store.count_runs(query) if member else {}

    def submitted(self, run_id: str, *, initiator: str, tenant: str) -> RunRecord:
        """The run ``initiator`` has just submitted in ``tenant`` (what a submit answers with); :class:`NotFound`
        for any other run."""
        run = self.store.get_run(run_id)
        if run.initiator != initiator or run.tenant != tenant:
            raise NotFound(f"no run {run_id!r}")
        return run

    def feed(self, run_id: str, *, after: int = 0, limit: int = FEED_BATCH) -> tuple[list[dict[str, Any]], str]:
        """What happened to run ``run_id`` since audit event ``after`` (the live feed, ``GET /v1/runs/{id}/events``:
        the caller has been authorised to read the run), at most ``limit`` items, oldest first, and the run's
        state now. Each item is what a reader of the run may see: the event, its step, who, when, and the state it
        moved from and to (not the audit's detail, which needs ``audit:read``)."""
        state = self.store.get_run(run_id).state
        rows = self.store.audit(run_id, after=after, limit=limit)
        return [{"id": r.id, "event": r.event, "step": r.step_id, "actor": r.actor, "at": r.ts,
                 "from": r.state_before, "to": r.state_after} for r in rows], state

    # -- definitions ---------------------------------------------------------------------------------
    def plan(self, digest: str) -> Plan:
        """The stored plan of ``digest``, verified against it (``PlanTampered`` otherwise), as the engine runs it."""
        return self.engine.plan(digest)

    def definitions(self, name: str | None = None) -> list[DefinitionRecord]:
        """The definition registry's records (of ``name``; None: all)."""
        return self.store.definitions(name)

    def stored_plans(self) -> list[tuple[str, int, str, float]]:
        """Every plan the store holds: (workflow, version, digest, stored at)."""
        return self.store.stored_plans()

    def plan_digests(self, name: str, version: int | None = None) -> list[tuple[str, int, float]]:
        """The plans stored for workflow ``name`` (of ``version``; None: any): (digest, version, stored at)."""
        return self.store.plan_digests(name, version)

    # -- the server's own records ---------------------------------------------------------------------
    def record(self, event: AuditEvent) -> None:
        """Append an audit event of the caller's own (a sign-in, a refused token), stamped now."""
        self.store.append_audit(event, self.clock.now())

    def check_store(self) -> None:
        """Raise the store's own error (``StoreUnavailable``, ...) when it does not answer a read."""
        self.store.query_runs(RunQuery(tenant="", limit=1))

    def server_state(self) -> ServerStore:
        """The server's own state in the runtime's store (API tokens, sessions, OIDC logins, rate limits)."""
        return server_store(self.store)

    def signed_events(self) -> SignedEvents:
        """The signed events' ledger (answers by event id, ordering) in the runtime's store."""
        if not isinstance(self.store, SignedEvents):
            raise StoreError(f"the store {self.store.url!r} keeps no signed events, which the events endpoint "
                             "needs; serve on a sqlite:/// or postgresql:// store")
        return self.store

    # -- approval notifications ----------------------------------------------------------------------
    def notifications(self, principal: str, *, tenant: str | None = None, failed: bool = False,
                      run_id: str | None = None, limit: int = 100) -> list[DeliveryRecord]:
        """The approval notifications ``principal`` may see (of runs it may read)."""
        return admin.listing(self.store, self.access, principal, tenant=tenant, failed=failed, run_id=run_id,
                             limit=limit)

    def retry_notification(self, principal: str, delivery_id: str) -> Any:
        """Re-queue a failed approval notification as ``principal`` (an operator); the row as it was."""
        return admin.retry(self.store, self.access, principal, delivery_id)
