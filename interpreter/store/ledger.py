"""The run ledger: the run state machine's writes and the scheduling around them (one aggregate of the store).

Submit a run, claim an attempt, commit its result (fenced by the attempt's token and the run's revision),
hand out due outbox rows, sweep expired leases and due timers, cancel, redrive, prune finished runs. Every
method that changes state is ONE atomic operation; the invariants it keeps are in :mod:`sealflow.store.base`.
Who reads runs back uses :class:`~sealflow.store.runs.RunReads`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sealflow.store.definitions import Registration
from sealflow.store.prune import BATCH, PruneReport
from sealflow.store.records import Claimed, Commit, Committed, Due, Message, NewRun, NextAttempt, RunRecord, SweepReport


@runtime_checkable
class RunLedger(Protocol):
    """Submit, claim, commit, the outbox and the timers, operator actions on a run."""

    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        """Store a plan once under its digest (a second put of the same digest does nothing)."""

    def submit(self, new: NewRun, now: float, limits: Any = None, definition: Registration | None = None
               ) -> tuple[RunRecord, bool]:
        """Create a run ``queued`` with its first attempt scheduled; or, for a known
        idempotency key with the same input hash, return the existing run (``created`` False).
        The same key with another input raises :class:`IdempotencyConflict`. With the tenant's
        ``limits`` (:class:`sealflow.runtime.config.TenantLimits`), a run over its queued-run limit or
        daily quota is refused (:class:`AdmissionRefused`) in the same transaction: nothing is written.
        With ``definition`` (a :class:`sealflow.store.definitions.Registration`) the definition,
        its source and envelope and any pin are recorded in the same transaction; a refused registration
        (:class:`~sealflow.store.definitions.DefinitionRefused`) writes nothing but its audit
        event."""

    def submit_claimed(self, new: NewRun, now: float, limits: Any = None, definition: Registration | None = None, *,
                       owner: str) -> tuple[RunRecord, bool, Claimed | None]:
        """:meth:`submit`, with the new run's first attempt claimed for ``owner`` in the same transaction (as a
        commit that carries a run on claims its next attempt: ``Commit.claim_as``), for a caller that runs it
        at once; the claim is None when the run was not created (an idempotent return). A store that cannot
        returns :meth:`submit`'s answer with None (the attempt is scheduled as by :meth:`submit`)."""

    def claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None = None, *, owner: str,
              now: float, running_limit: Any = None, slots: Any = None, slotless: bool = False) -> Claimed:
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

    def commit(self, commit: Commit, now: float) -> Committed:
        """Apply ``commit`` atomically, fenced by ``commit.step.token`` and ``commit.expected_rev`` (and, when
        ``commit.seen`` is given, refused as a conflict unless the run and attempt are as it says)."""

    def take_due(self, now: float, limit: int = 256) -> list[Due]:
        """Mark up to ``limit`` due, unsent outbox rows sent and return their messages, each with its run's
        priority (the dispatcher routes it without reading the run again), highest priority first."""

    def take_outbox(self, now: float, limit: int = 256) -> list[Message]:
        """Mark up to ``limit`` due, unsent outbox rows sent and return their messages (:meth:`take_due`)."""

    def sweep(self, now: float, *, redeliver_after: float = 60.0, limit: int = 500) -> SweepReport:
        """Requeue expired leases, turn due timers into outbox rows (or time runs out), and
        re-send outbox rows sent more than ``redeliver_after`` seconds ago and never claimed."""

    def next_due(self, run_id: str, *, redeliver_after: float = 60.0) -> float | None:
        """The earliest time something of this run becomes due (timer, outbox row, lease
        expiry, redelivery); None when only a human can move it."""

    def due_deadlines(self, now: float) -> list[str]:
        """Runs whose ``run_deadline`` timer is due at ``now`` (the sweeper times them out)."""

    def reset_dispatch(self) -> int:
        """Mark every sent outbox row unsent (the in-memory broker that held them is gone)."""

    def expire_leases(self, owner: str, now: float, why: str | None = None) -> int:
        """End the leases held by ``owner`` now (it is known to be dead: ``why`` says how it is known); each
        attempt goes back to ``scheduled`` as the sweep puts an expired one; how many."""

    def lease_owners(self) -> list[str]:
        """The owners of the leases held by running attempts of runs in flight."""

    def active_runs(self) -> list[str]:
        """Ids of the runs in flight (``queued``, ``running``, ``waiting``, ``cancelling``), oldest first."""

    def stalled_runs(self) -> list[str]:
        """Active runs without an active attempt (must never happen; recovery reports them)."""

    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord:
        """Cancel a run in flight (a running attempt's own commit finishes the job: ``cancelling``)."""

    def redrive(self, run_id: str, next_attempt: NextAttempt, now: float, *, actor: str,
                deadline: float | None) -> Committed:
        """Requeue a failed or timed-out run at ``next_attempt`` (on its original plan digest)."""

    def prune_runs(self, before: float, now: float, *, actor: str = "system", include_dead_letters: bool = False,
                   batch: int = BATCH, dry_run: bool = False) -> PruneReport:
        """Delete finished runs last changed before ``before`` (:mod:`sealflow.store.prune`)."""
