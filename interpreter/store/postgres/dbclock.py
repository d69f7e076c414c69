"""The PostgreSQL store's clock (``clock=db``, the default): leases, timers and every ``now`` on the database's
clock, so that clock skew between hosts cannot break a lease.

The store measures the offset of the database's ``clock_timestamp()`` from this host every few seconds and
shifts ``now`` and the due times the engine computed (``due_at``, deadlines) by it before the shared
statement code (:class:`~sealflow.store.sql.store.SqlStore`) runs. ``clock=caller`` takes
``now`` as given (tests on a fake clock). A mixin of
:class:`~sealflow.store.postgres.store.PostgresStore`.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from sealflow.core.clock import Clock
    from sealflow.core.ratelimits import Limit
    from sealflow.store.coordination import SlotHolder
    from sealflow.store.definitions import Registration
    from sealflow.store.prune import PruneReport
    from sealflow.store.records import AuditEvent, Claimed, Commit, Committed, NewRun, NextAttempt, RunRecord

    # the shared statement code whose state changes this mixin's methods put on the database clock (they call
    # it through super(): it follows this mixin in PostgresStore's bases)
    from sealflow.store.sql.store import SqlStore as _Shared
else:
    _Shared = object


class DbClockMixin(_Shared):
    """The database clock, and the state changes that take a ``now`` put on it (see this module)."""

    clock: Clock
    clock_mode: str
    _offset_at: float
    _offset_s: float

    if TYPE_CHECKING:  # the PostgreSQL store's (store.py, hotpath.py)
        def _conn(self) -> AbstractContextManager[psycopg.Connection]: ...

        def _hot_submit(self, new: NewRun, now: float) -> tuple[RunRecord, bool] | None: ...

        def _hot_claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None, owner: str,
                       now: float) -> Claimed | None: ...

        def _hot_commit(self, commit: Commit, now: float, shift: float = 0.0) -> Committed | None: ...

    # -- the database clock ---------------------------------------------------------------------------
    def _offset(self) -> float:
        """Seconds to add to this host's ``time.time()`` to be on the database's clock (re-measured every 5 s)."""
        mono = time.monotonic()
        if mono - self._offset_at > 5.0:
            with self._conn() as raw:
                before = time.time()
                got = raw.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
                assert got is not None  # one row
                db: float = got[0]
                after = time.time()
            self._offset_s, self._offset_at = db - (before + after) / 2, mono
        return self._offset_s

    def db_now(self) -> float:
        """The database's clock, in seconds since the epoch."""
        return time.time() + self._offset()

    def _on_db_clock(self, now: float) -> tuple[float, float]:
        """(the database's now, the shift from the caller's clock to it)."""
        if self.clock_mode != "db":
            return now, 0.0
        db = time.time() + self._offset()
        return db, db - now

    def _now(self) -> float:
        """Now for the shared statement code: the database's clock (``clock=caller``: the store's clock)."""
        return self._on_db_clock(self.clock.now())[0]

    # -- the clock on the other state changes ---------------------------------------------------------
    def _shifted_run(self, new: NewRun, now: float) -> tuple[NewRun, float]:
        now, shift = self._on_db_clock(now)
        if shift and new.deadline is not None:
            new = dataclasses.replace(new, deadline=new.deadline + shift)
        return new, now

    def submit_claimed(self, new: NewRun, now: float, limits: Any = None, definition: Registration | None = None, *,
                       owner: str) -> tuple[RunRecord, bool, Claimed | None]:
        new, now = self._shifted_run(new, now)
        return super().submit_claimed(new, now, limits, definition, owner=owner)

    def submit(self, new: NewRun, now: float, limits: Any = None, definition: Registration | None = None
               ) -> tuple[RunRecord, bool]:
        new, now = self._shifted_run(new, now)
        if limits is None and definition is None and not new.tags:  # nothing else to write: one statement
            done = self._hot_submit(new, now)
            if done is not None:
                return done
        return super().submit(new, now, limits, definition)

    def claim(self, run_id: str, step_id: str, attempt: int, token: int, tenant: str | None = None, *, owner: str,
              now: float, running_limit: Any = None, slots: Any = None, slotless: bool = False) -> Claimed:
        now, _ = self._on_db_clock(now)
        if slotless and running_limit is None:  # no bulkhead, lock or pool: one statement (hotpath.py)
            done = self._hot_claim(run_id, step_id, attempt, token, tenant, owner, now)
            if done is not None:
                return done
        return super().claim(run_id, step_id, attempt, token, tenant, owner=owner, now=now,
                             running_limit=running_limit, slots=slots)

    def slots(self, now: float, name: str | None = None) -> list[SlotHolder]:
        return super().slots(self._on_db_clock(now)[0], name)

    def commit(self, commit: Commit, now: float) -> Committed:
        now, shift = self._on_db_clock(now)
        # a carry or a run's end: one statement, batched (hotpath.py), which shifts the due times itself (a
        # copy of the commit with them shifted cost more than the rest of the clock's work)
        done = self._hot_commit(commit, now, shift)
        if done is not None:
            return done
        return super().commit(_shifted_commit(commit, shift) if shift else commit, now)

    def cancel(self, run_id: str, now: float, *, actor: str, reason: str = "") -> RunRecord:
        return super().cancel(run_id, self._on_db_clock(now)[0], actor=actor, reason=reason)

    def redrive(self, run_id: str, next_attempt: NextAttempt, now: float, *, actor: str,
                deadline: float | None) -> Committed:
        now, shift = self._on_db_clock(now)
        if shift:
            next_attempt = dataclasses.replace(next_attempt, due_at=next_attempt.due_at + shift)
            deadline = None if deadline is None else deadline + shift
        return super().redrive(run_id, next_attempt, now, actor=actor, deadline=deadline)

    # per-model rate limits (sql/ratelimits.py): the model's row locked, the window on the database clock
    _LOCK_LIMIT = " FOR UPDATE"

    def rate_take(self, model: str, key: str, now: float, limit: Limit, tokens: int) -> float | None:
        now, shift = self._on_db_clock(now)
        wait = super().rate_take(model, key, now, limit, tokens)
        return None if wait is None else wait - shift  # back on the caller's clock

    def rate_usage(self, model: str, now: float, window: float = 60.0) -> tuple[int, int]:
        return super().rate_usage(model, self._on_db_clock(now)[0], window)

    def expire_leases(self, owner: str, now: float, why: str | None = None) -> int:
        return super().expire_leases(owner, self._on_db_clock(now)[0], why)

    def due_deadlines(self, now: float) -> list[str]:
        return super().due_deadlines(self._on_db_clock(now)[0])

    def append_audit(self, event: AuditEvent, now: float) -> None:
        super().append_audit(event, self._on_db_clock(now)[0])

    def prune_runs(self, before: float, now: float, **kw: Any) -> PruneReport:
        now, shift = self._on_db_clock(now)
        return super().prune_runs(before + shift, now, **kw)

    def put_plan(self, digest: str, workflow: str, version: int, body_json: str, now: float) -> None:
        super().put_plan(digest, workflow, version, body_json, self._on_db_clock(now)[0])

    # the definition registry takes no ``now``: the shared code reads :meth:`_now`, on the database clock


def _shifted_commit(commit: Commit, shift: float) -> Commit:
    """``commit`` with the due times the caller computed moved onto the database's clock."""
    changes: dict[str, Any] = {}
    if commit.next is not None and commit.next.due_at is not None:
        changes["next"] = dataclasses.replace(commit.next, due_at=commit.next.due_at + shift)
    if commit.step is not None and commit.step.due_at is not None:
        changes["step"] = dataclasses.replace(commit.step, due_at=commit.step.due_at + shift)
    return dataclasses.replace(commit, **changes) if changes else commit
