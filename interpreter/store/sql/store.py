"""The store's statement code, shared by the SQL backends (:class:`SqlStore`).

Claims, commits, cancels, redrives, the sweep's steps, the audit chain, admission and the definition registry
are written once (here and in the mixins it is made of), in SQL both SQLite and PostgreSQL accept as it is
(:mod:`sealflow.store.sql`). A backend subclasses :class:`SqlStore` and gives it its transactions and reads:

* ``_tx()``: a context manager yielding a connection (``execute``/``executemany`` with ``?`` parameters) in a
  writing transaction, committed at its end (the queued audit events, ``_pending_of(c)``, appended to their chains
  by ``_chain`` first), rolled back on an exception; an :class:`IllegalTransition` is audited after the
  rollback, in a transaction of its own (``_illegal_event`` gives the row);
* ``_reading()``: the same, for reads in one snapshot; ``_read(sql, args)``: one read's rows;
* ``get_run(run_id)``: the run, read as cheaply as the backend can;
* the hooks the mixins name (``_fence_late``, ``_LOCK_EXPIRED``, ``_LOCK_TIMERS``, ``_LOCK_DELIVERIES``,
  ``_LOCK_LIMIT``): what a statement adds on one backend (``FOR UPDATE SKIP LOCKED``).

What only one database can say it writes in its own class: :class:`~sealflow.store.sqlite.store.SqliteStore`
(its file, WAL, ``?1`` numbered parameters) and :class:`~sealflow.store.postgres.store.PostgresStore` (its
pool, group commit, database clock, ``FOR UPDATE SKIP LOCKED``, the ledger functions). The mixins still live
under ``store/sqlite/``, where the code was first written for SQLite.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sealflow.core import states
from sealflow.store.base import (
    AttemptRecord,
    AuditEvent,
    Claimed,
    NewRun,
    NextAttempt,
    RunRecord,
)
from sealflow.store.coordination import SlotHolder
from sealflow.store.definitions import DefinitionRefused, DefinitionsMixin, Registration
from sealflow.store.errors import IdempotencyConflict, IllegalTransition, NotFound
from sealflow.store.prune import PruneMixin
from sealflow.store.records import LazyResults, Message
from sealflow.store.sql import admission as sqlite_admission
from sealflow.store.sql import rows
from sealflow.store.sql import slots as sqlite_slots
from sealflow.store.sql import tags as run_tags
from sealflow.store.sql.breakers import BreakersMixin
from sealflow.store.sql.children import STOPPING, ChildrenMixin
from sealflow.store.sql.conn import Conn, Row
from sealflow.store.sql.deliveries import DeliveriesMixin
from sealflow.store.sql.events import EventsMixin
from sealflow.store.sql.inbox import InboxMixin
from sealflow.store.sql.queries import QueriesMixin
from sealflow.store.sql.ratelimits import RateLimitsMixin
from sealflow.store.sql.reads import Reads
from sealflow.store.sql.reservations import ReservationsMixin
from sealflow.store.sql.sessions import SessionsMixin
from sealflow.store.sql.statements import PLAN_PUT
from sealflow.store.sql.steps import StepPathMixin
from sealflow.store.sql.sweep import SweepMixin
from sealflow.store.sql.tokens import TokensMixin

dumps = rows.dumps
_A_COLS, _CURSOR, _ACTIVE = rows.A_COLS, rows.CURSOR, rows.ACTIVE


class SqlStore(StepPathMixin, ChildrenMixin, SweepMixin, DefinitionsMixin, BreakersMixin, TokensMixin, QueriesMixin,
               EventsMixin, PruneMixin, ReservationsMixin, RateLimitsMixin, DeliveriesMixin, SessionsMixin, Reads,
               InboxMixin, run_tags.TagsMixin):
    """The statement code of the SQL backends (see the module); not a store by itself. Its backends satisfy the
    store's protocols structurally (sealflow.testing.conformance checks it)."""

    if TYPE_CHECKING:  # given by each backend
        url: str

    # -- audit helpers -----------------------------------------------------------------------------
    def _audit(self, c: Conn, now: float, run_id: str | None, step_id: str | None, event: str, actor: str = "system",
               before: str | None = None, after: str | None = None, detail: Mapping[str, Any] | None = None,
               chain: Mapping[str, Any] | None = None) -> None:
        """Queue an audit event; it is written with the transaction it belongs to, or not at all.
        ``chain``: chain columns set explicitly (tenant, decision, tool, summary, error)."""
        self._pending_of(c).append((run_id, step_id, event, actor, before, after,
                                    None if detail is None else dumps(detail), now, chain))

    @staticmethod
    def _illegal_event(exc: IllegalTransition) -> Row:
        """The audit row of an illegal transition (written by each backend in a transaction of its own, after
        the one that tried it was undone)."""
        info = getattr(exc, "info", {})
        return (info.get("run_id"), info.get("step_id"), "illegal_transition", info.get("actor", "system"),
                info.get("before"), info.get("after"), dumps({"kind": info.get("kind"), "message": str(exc)}),
                info.get("now", 0.0))

    @staticmethod
    def _illegal(kind: str, run_id: str, step_id: str | None, before: str, after: str, now: float,
                 actor: str = "system") -> IllegalTransition:
        what = f"run {run_id}" if kind == "run" else f"step {step_id!r} of run {run_id}"
        exc = IllegalTransition(f"{what} cannot go from {before!r} to {after!r}; see interpreter/states.py for the "
                                f"legal transitions")
        exc.info = {"kind": kind, "run_id": run_id, "step_id": step_id, "before": before, "after": after,
                    "now": now, "actor": actor}
        return exc

    def _step_to(self, c: Conn, now: float, run_id: str, step_id: str, before: str, after: str, actor: str = "system",
                 detail: Mapping[str, Any] | None = None, chain: Mapping[str, Any] | None = None, *,
                 slots: bool = True) -> None:
        """Move a step (``slots``: False when the attempt can hold no lock or pool slot, see Commit.holds_slots)."""
        if not states.step_can(before, after):
            raise self._illegal("step", run_id, step_id, before, after, now, actor)
        if before != after:
            self._audit(c, now, run_id, step_id, "step." + after, actor, before, after, detail, chain)
        if slots and before == "running" and after != "running":  # locks and pools: the attempt's slots go back
            sqlite_slots.release_attempt(c, now, run_id, step_id)

    def _run_to(self, c: Conn, now: float, run_id: str, before: str, after: str, actor: str = "system",
                detail: Mapping[str, Any] | None = None, out: list[Message] | None = None) -> None:
        """Move a run. ``out``: the messages of the commit in progress that dispatches inline (a fan-out's
        promoted child, its woken parent: store/sql/children.py), else None."""
        if not states.run_can(before, after) or (before == "completed" and after != before and c.execute(
                "SELECT parent_run_id FROM runs WHERE id = ?", (run_id,)).fetchone()[0] is None):
            # (completed -> compensating: a fan-out child's items undone, never a top-level run)
            raise self._illegal("run", run_id, None, before, after, now, actor)
        if before != after:
            self._audit(c, now, run_id, None, "run." + after, actor, before, after, detail)
        ends = after in states.RUN_FINAL and before not in states.RUN_FINAL
        if ends:  # run-level concurrency slots go back
            sqlite_slots.release_run(c, now, run_id)
        if ends or (after in STOPPING and before != after):
            # a fan-out child ended: count it, promote the next, wake the parent; a parent stopping: its
            # children in flight stop too (store/sql/children.py)
            self._fanout_moved(c, now, run_id, after, ends, (detail or {}).get("error_class"), actor, out)

    def slots(self, now: float, name: str | None = None) -> list[SlotHolder]:
        """Who holds, then who waits for, the slots of lock/pool ``name`` (every name: None), in order."""
        with self._tx() as c:  # stale holders and waiters are dropped on the way
            return sqlite_slots.listing(c, now, name)

    def append_audit(self, event: AuditEvent, now: float) -> None:
        with self._tx() as c:
            self._audit(c, now, event.run_id, event.step_id, event.event, event.actor, event.state_before,
                        event.state_after, event.detail, event.chain_fields())

    # -- plans and runs ----------------------------------------------------------------------------
    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        with self._tx() as c:
            c.execute(PLAN_PUT, (digest, workflow, version, body_json, now))

    def get_plan(self, digest: str) -> str:
        got = self._read("SELECT body FROM plans WHERE digest = ?", (digest,))
        if not got:
            raise NotFound(f"no plan with digest {digest} in {self.url}; was the run submitted to another store?")
        body: str = got[0][0]
        return body

    def _get_run(self, c: Conn, run_id: str) -> RunRecord:
        row = c.execute(f"SELECT {rows.RUN_COLS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r} in this store; `sealflow runs list` lists the runs you may see")
        return rows.run(row)

    def list_runs(self, *, states: tuple[str, ...] | None = None, limit: int = 100,
                  tenant: str | None = None) -> list[RunRecord]:
        cond, args = rows.where((f"state IN ({','.join('?' * len(states or ()))})", tuple(states) if states else None),
                                ("tenant = ?", tenant))
        got = self._read(f"SELECT {rows.RUN_COLS} FROM runs{cond} ORDER BY created_at LIMIT ?", (*args, limit))
        return [rows.run(r) for r in got]

    def attempts(self, run_id: str) -> list[AttemptRecord]:
        got = self._read(f"SELECT {rows.ATTEMPT_COLS}, error_trace FROM attempts WHERE run_id = ? "
                         "ORDER BY seq", (run_id,))
        return [rows.attempt(r) for r in got]

    def active_attempt(self, run_id: str) -> AttemptRecord | None:
        got = self._read(f"SELECT {_A_COLS} FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.id = ? "
                         f"AND a.state IN {_ACTIVE}", (run_id,))
        return rows.attempt(got[0]) if got else None

    def results(self, run_id: str, only: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
        if only is None:
            got = self._read("SELECT step_id, status, output FROM results WHERE run_id = ?", (run_id,))
        else:
            names = sorted(set(only))
            if not names:
                return {}
            got = self._read("SELECT step_id, status, output FROM results WHERE run_id = ? AND step_id IN "
                             f"({', '.join('?' * len(names))})", (run_id, *names))
        return {r[0]: (r[1], r[2]) for r in got}

    def submit(self, new: NewRun, now: float, limits: sqlite_admission.Quota | None = None,
               definition: Registration | None = None) -> tuple[RunRecord, bool]:
        return self._submit_recorded(new, now, limits, definition, None)[:2]

    def submit_claimed(self, new: NewRun, now: float, limits: sqlite_admission.Quota | None = None,
                       definition: Registration | None = None, *, owner: str
                       ) -> tuple[RunRecord, bool, Claimed | None]:
        return self._submit_recorded(new, now, limits, definition, owner)

    def _submit_recorded(self, new: NewRun, now: float, limits: sqlite_admission.Quota | None,
                         definition: Registration | None, owner: str | None
                         ) -> tuple[RunRecord, bool, Claimed | None]:
        try:
            return self._submit(new, now, limits, definition, owner)
        except DefinitionRefused as exc:  # the transaction was rolled back: only the refusal is recorded
            assert definition is not None  # (only a definition's registration is refused)
            self.audit_definition_refused(definition, exc, now, tenant=new.tenant)
            raise

    def _submit(self, new: NewRun, now: float, limits: sqlite_admission.Quota | None,
                definition: Registration | None, owner: str | None) -> tuple[RunRecord, bool, Claimed | None]:
        with self._tx() as c:
            if new.idempotency_key is not None:
                got = c.execute("SELECT id, input_hash FROM runs WHERE tenant = ? AND workflow = ? AND "
                                "idempotency_key = ?", (new.tenant, new.workflow, new.idempotency_key)).fetchone()
                if got is not None:
                    if got[1] != new.input_hash:
                        raise IdempotencyConflict(
                            f"idempotency key {new.idempotency_key!r} was used by run {got[0]} with a different "
                            f"input; send the same input to get that run back, or use a new key")
                    return self._get_run(c, got[0]), False, None
            if definition is not None:  # DefinitionRefused (second digest, rollback): nothing is written
                self._register(c, definition, now)
            if limits is not None:
                sqlite_admission.admit(c, new.tenant, now, limits)  # AdmissionRefused: nothing is written
            c.execute(PLAN_PUT, (new.plan_digest, new.workflow, new.workflow_version, new.plan_json, now))
            if new.tags:
                run_tags.insert(c, new.id, new.tenant, new.tags)
            # claimed for ``owner``: the run is running at its second revision, as its first claim leaves it
            state, rev = ("queued", 1) if owner is None else ("running", 2)
            created = c.execute(
                "INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, "
                "initiator, idempotency_key, input_hash, created_at, updated_at, deadline, cursor_step, "
                "cursor_attempt, priority, acting_as, access_mode, signer) "
                f"VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,1,?,?,?,?) RETURNING {rows.RUN_COLS}",
                (new.id, new.tenant, new.workflow, new.workflow_version, new.plan_digest, new.input_json, state,
                 rev, new.initiator, new.idempotency_key, new.input_hash, now, now, new.deadline, new.first_step,
                 new.priority, new.acting_as, new.access_mode, new.signer))
            self._audit(c, now, new.id, None, "run.created", new.initiator, None, "created",
                        {"workflow": new.workflow, "version": new.workflow_version, "plan": new.plan_digest,
                         "tenant": new.tenant, "idempotency_key": new.idempotency_key,
                         **({"acting_as": new.acting_as} if new.acting_as not in (None, new.initiator) else {}),
                         **({"access": new.access_mode} if new.access_mode else {}),
                         **({"signer": new.signer} if new.signer else {})})
            self._run_to(c, now, new.id, "created", "queued", new.initiator)
            if new.deadline is not None:
                c.execute("INSERT INTO timers (run_id, kind, fire_at) VALUES (?, 'run_deadline', ?)",
                          (new.id, new.deadline))
            first = NextAttempt(new.first_step, 1, "scheduled", now, new.first_lease_ms)
            if owner is None:
                self._insert_attempt(c, now, new.id, first, False, 1, first=True)
                return rows.run(created.fetchone()), True, None  # nothing after the insert changes the run's row
            # the first attempt claimed for ``owner`` (as a carry-on commit claims the next: no outbox row, the
            # scheduling and the claim one audit row), then the run's own move to running, as the claim makes it
            carried = self._insert_claimed(c, now, new.id, first, 1, "system", owner)
            self._run_to(c, now, new.id, "queued", "running", owner)
            run = rows.run(created.fetchone())
            return run, True, Claimed(run, rows.attempt(carried.row()), LazyResults(
                functools.partial(self.results, new.id)))

    # -- reads -------------------------------------------------------------------------------------
