"""The state store interface: the single source of truth of every run.

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

import abc
from collections.abc import Iterable
from typing import Any

from sealflow.store.deliveries import DeliveryRecord, NewDelivery  # noqa: F401 - re-exported
from sealflow.store.records import (  # noqa: F401 - re-exported: the records are part of the interface
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


class Store(abc.ABC):
    """Abstract state store. Every mutating method is one atomic operation."""

    url: str = ""
    #: whether a caller waiting for a run should ride out this store's outages (a server that restarts or fails
    #: over comes back: PostgreSQL) rather than fail at once (a local file's disk full or read-only: SQLite)
    rides_out_outages: bool = False

    # -- lifecycle -----------------------------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def schema_version(self) -> int: ...

    # -- plans and runs ------------------------------------------------------------------------
    @abc.abstractmethod
    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        """Store a plan once under its digest (a second put of the same digest does nothing)."""

    @abc.abstractmethod
    def get_plan(self, digest: str) -> str:
        """The plan JSON stored under ``digest``; :class:`NotFound` if none."""

    @abc.abstractmethod
    def submit(self, new: NewRun, now: float, limits=None, definition=None) -> tuple[RunRecord, bool]:
        """Create a run ``queued`` with its first attempt scheduled; or, for a known
        idempotency key with the same input hash, return the existing run (``created`` False).
        The same key with another input raises :class:`IdempotencyConflict`. With the tenant's
        ``limits`` (:class:`sealflow.runtime.config.TenantLimits`), a run over its queued-run limit or
        daily quota is refused (:class:`AdmissionRefused`) in the same transaction: nothing is written.
        With ``definition`` (a :class:`sealflow.store.definitions.Registration`) the definition,
        its source and envelope and any pin are recorded in the same transaction; a refused registration
        (:class:`~sealflow.store.definitions.DefinitionRefused`) writes nothing but its audit
        event."""

    def submit_claimed(self, new: NewRun, now: float, limits=None, definition=None, *, owner: str
                       ) -> tuple[RunRecord, bool, Claimed | None]:
        """:meth:`submit`, with the new run's first attempt claimed for ``owner`` in the same transaction (as a
        commit that carries a run on claims its next attempt: ``Commit.claim_as``), for a caller that runs it
        at once; the claim is None when the run was not created (an idempotent return). A store that cannot
        does not claim it (the attempt is scheduled as by :meth:`submit`)."""
        run, created = self.submit(new, now, limits, definition)
        return run, created, None

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord: ...

    @abc.abstractmethod
    def list_runs(self, *, states: tuple[str, ...] | None = None, limit: int = 100,
                  tenant: str | None = None) -> list[RunRecord]:
        """Runs oldest first, of the given states and ``tenant`` (None: every tenant)."""

    @abc.abstractmethod
    def attempts(self, run_id: str) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first."""

    @abc.abstractmethod
    def active_attempt(self, run_id: str) -> AttemptRecord | None: ...

    @abc.abstractmethod
    def results(self, run_id: str, only: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
        """Step id -> (status, output JSON text), the latest visit of each step (of the steps in ``only``;
        None: of every step)."""

    # -- the step path -------------------------------------------------------------------------
    @abc.abstractmethod
    def claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None = None, *, owner: str,
              now: float, running_limit=None, slots=None, slotless: bool = False) -> Claimed:
        """Compare-and-set: take the attempt's lease with a new fencing token, or raise
        :class:`MessageRefused` (after auditing ``message_refused``). A ``tenant`` that is not the
        run's is refused (``tenant_mismatch``): one naming another tenant before anything else is checked
        (a replayed message with its tenant changed is a cross-tenant attempt, not merely stale), one naming
        none ("") last; None skips that check (direct callers, not messages).
        ``running_limit(tenant)``: the tenant's bulkhead; a scheduled attempt of a tenant with that
        many attempts running is not claimed: its outbox row is due again shortly and
        :class:`ClaimDeferred` is raised. ``slots(run, attempt, results)``: the lock and pool slots
        (:class:`~sealflow.store.coordination.SlotRequest`) a scheduled attempt needs, called
        inside the claim (``results`` is a function reading the run's results); the claim takes all of them
        (``Claimed.grants``) or none: the attempt waits in line, its outbox row due again later, and
        :class:`~sealflow.store.coordination.SlotsBusy` (a :class:`ClaimDeferred`) is raised.
        ``slotless``: the caller knows the attempt's step needs no slot (``slots`` would give none), which lets
        a store claim it without asking (PostgreSQL: in one statement, store/postgres/hotpath.py)."""

    def children(self, run_id: str, step_id: str | None = None, attempt: int | None = None, *,
                 offset: int = 0, limit: int = 100_000) -> list[ChildRecord]:
        """The fan-out child runs of ``run_id`` (of one step and attempt when given), in index order."""
        raise NotImplementedError(f"{type(self).__name__} has no fan-out")

    def child_counts(self, run_id: str) -> dict[tuple[str, int], dict[str, int]]:
        """``(step, attempt) -> {state: count}`` of the fan-out child runs of ``run_id``."""
        raise NotImplementedError(f"{type(self).__name__} has no fan-out")

    def run_usage(self, run_id: str) -> tuple[int, int, float, int, float | None]:
        """What a run has spent (steps, tokens, cost, tool calls) and its deadline."""
        run = self.get_run(run_id)
        return run.steps_executed, run.tokens, run.cost_usd, run.tool_calls, run.deadline

    def fanout(self, run_id: str, step_id: str, attempt: int) -> dict | None:
        """The counters of a fan-out attempt (total, concurrency, tolerated, started, ended, failed, state)."""
        raise NotImplementedError(f"{type(self).__name__} has no fan-out")

    def slots(self, now: float, name: str | None = None) -> list:
        """Holders, then waiters in arrival order, of the lock or pool ``name`` (None: every name)."""
        raise NotImplementedError(f"{type(self).__name__} has no locks or pools")

    @abc.abstractmethod
    def commit(self, commit: Commit, now: float) -> Committed:
        """Apply ``commit`` atomically, fenced by ``commit.step.token`` and ``commit.expected_rev`` (and, when
        ``commit.seen`` is given, refused as a conflict unless the run and attempt are as it says)."""

    @abc.abstractmethod
    def take_due(self, now: float, limit: int = 256) -> list[Due]:
        """Mark up to ``limit`` due, unsent outbox rows sent and return their messages, each with its run's
        priority (the dispatcher routes it without reading the run again), highest priority first."""

    def take_outbox(self, now: float, limit: int = 256) -> list[Message]:
        """Mark up to ``limit`` due, unsent outbox rows sent and return their messages (:meth:`take_due`)."""
        return [due.message for due in self.take_due(now, limit)]

    @abc.abstractmethod
    def sweep(self, now: float, *, redeliver_after: float = 60.0, limit: int = 500) -> SweepReport:
        """Requeue expired leases, turn due timers into outbox rows (or time runs out), and
        re-send outbox rows sent more than ``redeliver_after`` seconds ago and never claimed."""

    @abc.abstractmethod
    def next_due(self, run_id: str, *, redeliver_after: float = 60.0) -> float | None:
        """The earliest time something of this run becomes due (timer, outbox row, lease
        expiry, redelivery); None when only a human can move it."""

    @abc.abstractmethod
    def reset_dispatch(self) -> int:
        """Mark every sent outbox row unsent (the in-memory broker that held them is gone)."""

    @abc.abstractmethod
    def expire_leases(self, owner: str, now: float, why: str | None = None) -> int:
        """End the leases held by ``owner`` now (it is known to be dead: ``why`` says how it is known); each
        attempt goes back to ``scheduled`` as the sweep puts an expired one; how many."""

    @abc.abstractmethod
    def lease_owners(self) -> list[str]: ...

    @abc.abstractmethod
    def active_runs(self) -> list[str]:
        """Ids of the runs in flight (``queued``, ``running``, ``waiting``, ``cancelling``), oldest first."""

    @abc.abstractmethod
    def stalled_runs(self) -> list[str]:
        """Active runs without an active attempt (must never happen; recovery reports them)."""

    # -- operator actions ----------------------------------------------------------------------
    @abc.abstractmethod
    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord: ...

    @abc.abstractmethod
    def redrive(self, run_id: str, next_attempt: NextAttempt, now: float, *, actor: str,
                deadline: float | None) -> Committed:
        """Requeue a failed or timed-out run at ``next_attempt`` (on its original plan digest)."""

    # -- reads ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def ledger_get(self, tenant: str, key: str) -> LedgerRecord | None: ...

    @abc.abstractmethod
    def dead_letters(self, *, include_redriven: bool = False) -> list[DeadLetterRecord]: ...

    @abc.abstractmethod
    def dead_letter(self, run_id: str) -> DeadLetterRecord | None: ...

    @abc.abstractmethod
    def timers(self, run_id: str | None = None) -> list[TimerRecord]: ...

    @abc.abstractmethod
    def outbox(self, run_id: str | None = None) -> list[OutboxRecord]: ...

    @abc.abstractmethod
    def audit(self, run_id: str | None = None, *, limit: int | None = None,
              event: str | None = None, after: int | None = None) -> list[AuditRecord]:
        """Audit events, oldest first: of run ``run_id`` (None: every run's), only those called ``event``, only
        those appended after the event of id ``after``."""

    @abc.abstractmethod
    def audit_last_id(self) -> int:
        """The id of the newest audit event (0: none): where a reader of events from now on starts."""

    @abc.abstractmethod
    def append_audit(self, event: AuditEvent, now: float) -> None:
        """Append one event that goes with no state change (e.g. a fenced-off commit)."""

    # -- the audit chain and tenant usage ------------------------------------------------------
    @abc.abstractmethod
    def audit_chain(self, tenant: str | None) -> list[tuple]:
        """A tenant's audit events in append order, as
        :data:`sealflow.store.auditchain.VERIFY_COLS` tuples."""

    @abc.abstractmethod
    def audit_heads(self) -> dict[str, tuple[int, str]]:
        """Tenant -> (seq, hash) of its chain's last event, as recorded when it was appended."""

    @abc.abstractmethod
    def audit_snapshot(self, tenant: str | None) -> tuple[tuple[int, str] | None, list[tuple]]:
        """A tenant's head (None: none) and its chain (as :meth:`audit_chain`), read at one moment: on a live
        store, what workers append meanwhile is in neither (read apart, a chain read after its head holds
        events the head does not, and looks cut)."""

    @abc.abstractmethod
    def audit_tenants(self) -> list[str | None]:
        """Every tenant with audit events (None for events that name no tenant)."""

    @abc.abstractmethod
    def tenant_usage(self, tenant: str, day: int) -> tuple[int, float]:
        """Tokens and cost (USD) charged to ``tenant`` on UTC day number ``day``."""

    # -- the definition registry (see :mod:`sealflow.store.definitions`) -----------------------
    @abc.abstractmethod
    def register_definition(self, name: str, version: int, digest: str, signer: str, now: float, *,
                            pin: bool = False, actor: str = "system"):
        """Record a loaded (name, version, digest) and its signer, atomically refusing a second digest for a
        recorded (name, version) and a lower version than the highest without ``pin``; returns the record."""

    @abc.abstractmethod
    def definitions(self, name: str | None = None) -> list:
        """Every recorded definition version (with ``active`` and ``pinned``), by name then version."""

    @abc.abstractmethod
    def record_signer(self, run_id: str, signer: str) -> None:
        """Record who signed the definition a run executes (``unsigned`` in development mode)."""

    @abc.abstractmethod
    def run_signer(self, run_id: str) -> str | None: ...

    @abc.abstractmethod
    def definition_sources(self, digest: str) -> list:
        """The submitted bytes and signature envelopes of plan ``digest``
        (:class:`~sealflow.store.definitions.DefinitionSource`), oldest first."""

    @abc.abstractmethod
    def mark_definition(self, name: str, version: int, digest: str, now: float, *, refused: str | None,
                        actor: str, signer: str | None = None) -> bool:
        """An executor's verdict on a recorded version: refused (why), or verified (``refused`` None)."""

    @abc.abstractmethod
    def due_deadlines(self, now: float) -> list[str]:
        """Runs whose ``run_deadline`` timer is due at ``now`` (the sweeper times them out)."""

    # -- circuit breakers (see :mod:`sealflow.store.sqlite.breakers`) -------------------------
    @abc.abstractmethod
    def breaker_admit(self, name: str, now: float, settings):
        """In one transaction: may a call behind breaker ``name`` go through now? An open breaker past its
        cool-down becomes half-open and gives this caller the one probe
        (:class:`sealflow.core.breakers.Admission`)."""

    @abc.abstractmethod
    def breaker_record(self, name: str, now: float, settings, *, error_class: str | None, probe: bool,
                       message: str | None = None, called: bool = True) -> tuple[str, str]:
        """In one transaction: record the end of a call (``called`` False: the target was not called, a
        probe is handed back); return the breaker's state before and after."""

    @abc.abstractmethod
    def breakers(self) -> list:
        """Every breaker that recorded something (:class:`~sealflow.core.breakers.BreakerRecord`)."""

    @abc.abstractmethod
    def breaker_reset(self, name: str, now: float) -> bool:
        """Close breaker ``name`` and forget its failures; False when there is none."""

    # -- browsing runs and plans (see :mod:`sealflow.store.sqlite.queries`) ---------------
    @abc.abstractmethod
    def query_runs(self, query: RunQuery) -> list[RunRecord]:
        """The runs of ``query.tenant`` that match its filters, newest first (``created_at``, then ``id``),
        strictly after ``query.after`` (keyset pagination), at most ``query.limit``."""

    @abc.abstractmethod
    def stored_plans(self) -> list[tuple[str, int, str, float]]:
        """``(workflow, version, digest, stored_at)`` of every plan stored, by name, version, then time."""

    @abc.abstractmethod
    def plan_digests(self, workflow: str, version: int | None = None) -> list[tuple[str, int, float]]:
        """``(digest, version, stored_at)`` of the plans stored for ``workflow`` (and ``version``), newest first."""

    # -- API tokens (see :mod:`sealflow.store.sqlite.tokens`) ----------------------------
    @abc.abstractmethod
    def create_api_token(self, token: ApiTokenRecord, now: float) -> ApiTokenRecord:
        """Record a new token (its secret's hash only); audited as ``api_token.created``."""

    @abc.abstractmethod
    def api_token(self, token_id: str) -> ApiTokenRecord | None: ...

    @abc.abstractmethod
    def api_tokens(self, tenant: str | None = None) -> list[ApiTokenRecord]:
        """Every token (of ``tenant``), oldest first; revoked and expired ones included."""

    @abc.abstractmethod
    def revoke_api_token(self, token_id: str, now: float, *, actor: str) -> ApiTokenRecord:
        """Revoke a token (again: nothing changes); an unknown id raises :class:`InvalidOperation`."""

    # -- the server's sign-in state (see :mod:`sealflow.store.sqlite.sessions`) ----------
    @abc.abstractmethod
    def session_put(self, row: Any, *, sweep: int = 100) -> None:
        """Record a new ``/ui`` session (a ``SessionRow``: its id's hash, never the id); sweep ended ones."""

    @abc.abstractmethod
    def session_get(self, id_hash: str, now: float, *, touch_after: float = 60.0) -> Any:
        """The live session ``id_hash`` (a ``SessionRow``, its use recorded), or None."""

    @abc.abstractmethod
    def session_end(self, id_hash: str) -> bool:
        """End a session for every process (sign-out); False if it was not there."""

    @abc.abstractmethod
    def oidc_login_put(self, state_hash: str, nonce: str, verifier: str, now: float, expires_at: float, *,
                       sweep: int = 100) -> None:
        """Record a started OIDC login by its state's hash."""

    @abc.abstractmethod
    def oidc_login_spend(self, state_hash: str, now: float) -> tuple[str, str] | None:
        """``(nonce, verifier)`` of a started, unexpired login, deleted as read (spent once), else None."""

    @abc.abstractmethod
    def server_sweep(self, now: float, rate_window: float, limit: int = 500, *, rate_prefix: str = "@http:") -> int:
        """Remove up to ``limit`` ended sessions, expired logins and old server rate-limit grants."""

    @abc.abstractmethod
    def rate_take(self, model: str, key: str, now: float, limit: Any, tokens: int) -> float | None:
        """Grant call ``key`` against ``model``'s rate ``limit`` at ``now`` (None), else when it would fit."""

    @abc.abstractmethod
    def rate_release(self, key: str) -> bool:
        """Give grant ``key`` back whole (its call was not made); False if it is gone."""

    # -- notification deliveries (see :mod:`sealflow.store.sqlite.deliveries`) ------------
    @abc.abstractmethod
    def take_deliveries(self, now: float, limit: int = 50, lease: float = 60.0) -> list[DeliveryRecord]:
        """Due pending deliveries, each counted as one more attempt and leased for ``lease`` seconds."""

    @abc.abstractmethod
    def settle_delivery(self, taken: DeliveryRecord, now: float, *, state: str, next_at: float | None = None,
                        error: str | None = None, actor: str = "notifier") -> bool:
        """Delivered, pending again at ``next_at``, or failed (audited); False if the row moved on meanwhile."""

    @abc.abstractmethod
    def retry_delivery(self, delivery_id: str, now: float, *, actor: str) -> DeliveryRecord | None:
        """Re-queue a failed delivery (audited); the row as it was, or None for an unknown id."""

    @abc.abstractmethod
    def deliveries(self, *, state: str | None = None, run_id: str | None = None,
                   limit: int = 100) -> list[DeliveryRecord]:
        """Deliveries, newest first."""
