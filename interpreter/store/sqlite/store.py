"""The SQLite store: the embedded default (``sqlite:///.sealflow/state.db``).

WAL journal, ``synchronous=NORMAL`` (a commit survives a process crash; an OS
crash may lose the last commits, never corrupt the file), ``busy_timeout`` for
other processes on the same file. WAL checkpoints (which fsync) run on a
background thread with its own connection instead of inside a step's commit. One connection per store object guarded by
a lock (threads of one process queue on the lock instead of spinning in
SQLite's busy handler); every write is one ``BEGIN IMMEDIATE`` transaction, so
each operation of :class:`~sealflow.store.base.Store` is atomic. Statements
are fixed strings so the sqlite3 statement cache keeps them prepared.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator

from sealflow.core import states
from sealflow.core.clock import SYSTEM, Clock
from sealflow.store.auditchain import SqliteChain
from sealflow.store.base import (
    AttemptRecord,
    AuditEvent,
    Claimed,
    NewRun,
    NextAttempt,
    RunRecord,
)
from sealflow.store.definitions import DefinitionRefused, DefinitionsMixin
from sealflow.store.errors import (
    IdempotencyConflict,
    IllegalTransition,
    InvalidOperation,
    NotFound,
    StoreError,
    StoreUnavailable,
)
from sealflow.store.prune import PruneMixin
from sealflow.store.records import LazyResults
from sealflow.store.sqlite import admission as sqlite_admission
from sealflow.store.sqlite import rows
from sealflow.store.sqlite import slots as sqlite_slots
from sealflow.store.sqlite.breakers import BreakersMixin
from sealflow.store.sqlite.children import STOPPING, ChildrenMixin
from sealflow.store.sqlite.deliveries import DeliveriesMixin
from sealflow.store.sqlite.disk import (  # noqa: F401 - wal_size re-exported (tests, benchmarks)
    WAL_LIMIT,
    Checkpointer,
    WalMixin,
    hint,
    io_failure,
    wal_size,
)
from sealflow.store.sqlite.events import EventsMixin
from sealflow.store.sqlite.queries import QueriesMixin
from sealflow.store.sqlite.ratelimits import RateLimitsMixin
from sealflow.store.sqlite.reads import Reads
from sealflow.store.sqlite.reservations import ReservationsMixin
from sealflow.store.sqlite.schema import migrate
from sealflow.store.sqlite.sessions import SessionsMixin
from sealflow.store.sqlite.steps import StepPathMixin
from sealflow.store.sqlite.sweep import SweepMixin
from sealflow.store.sqlite.tokens import TokensMixin

dumps = rows.dumps
_A_COLS, _CURSOR, _ACTIVE = rows.A_COLS, rows.CURSOR, rows.ACTIVE

# The sqlite3 module binds int, float, str and bytearray directly, but sends every other parameter through
# its adaptation protocol, which for None and bool (every NULL column and flag a step writes) fails two
# attribute lookups, each building and dropping an AttributeError: about a third of a bound statement's cost
# here. With an adapter registered for each, the lookup is one dict hit, and the values bind exactly as
# before (None as NULL, a bool as its integer). Process-wide, but neutral for any other user of sqlite3:
# neither type is one whose registration makes the module adapt every value (int, float, str, bytearray).
sqlite3.register_adapter(type(None), lambda _: None)
sqlite3.register_adapter(bool, int)


class SqliteStore(StepPathMixin, ChildrenMixin, SweepMixin, DefinitionsMixin, BreakersMixin, TokensMixin, QueriesMixin,
                  EventsMixin, PruneMixin, ReservationsMixin, RateLimitsMixin, DeliveriesMixin, SessionsMixin, Reads,
                  WalMixin):
    """The store on one SQLite file: every protocol of :data:`sealflow.store.base.PROTOCOLS` (the runtime's
    :class:`~sealflow.store.base.Store` and the server's :class:`~sealflow.store.serverstate.ServerStore`)."""

    url: str = ""
    rides_out_outages = False  # a local file's disk full or read-only is not waited out (Store.rides_out_outages)

    def __init__(self, path: str = ".sealflow/state.db", *, clock: Clock | None = None, busy_timeout_ms: int = 10_000,
                 checkpoint_interval: float = 0.25, wal_limit: int = WAL_LIMIT):
        #: the clock this store stamps with, given once (Store.clock)
        self.clock: Clock = clock or SYSTEM
        self.path = path
        self.url = f"sqlite:///{path}"
        if path != ":memory:":
            folder = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as exc:  # a read-only or special file system, no permission, a file in the way
                raise StoreUnavailable(f"cannot open SQLite store {path}: its folder {folder} cannot be made: "
                                       f"{exc.strerror or exc}; point --store (or $SEALFLOW_STORE, store: in "
                                       "sealflow.yaml) at a folder this process may write") from None
            if os.path.isdir(path):
                raise StoreUnavailable(f"cannot open SQLite store {path}: it is a folder, not a file; name the "
                                       f"store's file, e.g. sqlite:///{os.path.join(path, 'state.db')}")
        self._lock = threading.RLock()
        self._pending: list[tuple] = []  # audit rows of the transaction in progress
        self._chain = SqliteChain()  # appends them hash-chained per tenant (sealflow.store.auditchain)
        try:
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                         cached_statements=512, timeout=busy_timeout_ms / 1000)
            c = self._conn
            c.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if path != ":memory:":
                c.execute("PRAGMA journal_mode = WAL")
            c.execute("PRAGMA synchronous = NORMAL")
            c.execute("PRAGMA temp_store = MEMORY")
            # once a checkpoint resets the WAL, the next writer truncates the file to this size
            c.execute(f"PRAGMA journal_size_limit = {int(wal_limit) if wal_limit else -1}")
            self._version = migrate(c, path=path)
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc).lower():
                if getattr(self, "_conn", None) is not None:
                    self._conn.close()
                raise StoreError(f"cannot open SQLite store: {path} is not a SQLite database (another kind of file); "
                                 "point --store (or $SEALFLOW_STORE, store: in sealflow.yaml) at the store's file")\
                    from None
            if not io_failure(exc):
                raise
            raise StoreUnavailable(f"cannot open SQLite store {path}: {exc}; {hint(exc)}") from None
        self._checkpointer: Checkpointer | None = None
        self._busy_ms = int(busy_timeout_ms)
        self._wal_limit = wal_limit if path != ":memory:" else 0
        self._restart_after = 0.0
        self._checkpointing = threading.Lock()  # one checkpoint of this process at a time (sqlite/disk.py)
        if path != ":memory:" and checkpoint_interval:
            c.execute("PRAGMA wal_autocheckpoint = 0")
            self._checkpointer = Checkpointer(path, checkpoint_interval, busy_timeout_ms, self._checkpointing)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # type: ignore[assignment]

    def schema_version(self) -> int:
        return self._version

    def _now(self) -> float:
        """Now on the store's clock (the PostgreSQL store: on the database's, store/postgres/dbclock.py)."""
        return self.clock.now()

    def _unavailable(self, exc: BaseException, doing: str) -> StoreUnavailable:
        return StoreUnavailable(f"SQLite store {self.path}: {doing} failed, nothing was changed: {exc}; "
                                f"{hint(exc)}")

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            c = self._conn
            if c is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if io_failure(exc):
                    raise self._unavailable(exc, "a write") from None
                raise
            try:
                yield c
                if self._pending:
                    self._chain.append(c, self._pending)
            except IllegalTransition as exc:
                self._pending.clear()
                c.execute("ROLLBACK")
                self._audit_illegal(c, exc)
                raise
            except sqlite3.Error as exc:
                self._pending.clear()
                self._rollback(c)
                if io_failure(exc):
                    raise self._unavailable(exc, "a write") from None
                raise
            except BaseException:
                self._pending.clear()
                self._rollback(c)
                raise
            self._pending.clear()
            try:
                c.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(c)
                if io_failure(exc):
                    raise self._unavailable(exc, "a commit") from None
                raise
            if self._wal_limit:
                self._bound_wal(c)  # a burst of writes: bound the WAL now, not at the next tick

    @staticmethod
    def _rollback(c: sqlite3.Connection) -> None:
        if c.in_transaction:  # SQLite may have rolled back already (disk full, I/O error)
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """Reads in one transaction (one snapshot of the file), under this process's lock."""
        with self._lock:
            if self._conn is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            c = self._conn
            try:
                c.execute("BEGIN")
                try:
                    yield c
                finally:
                    if c.in_transaction:
                        c.execute("COMMIT")
            except sqlite3.Error as exc:
                if io_failure(exc):
                    raise self._unavailable(exc, "a read") from None
                raise

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._conn is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                if io_failure(exc):
                    raise self._unavailable(exc, "a read") from None
                raise

    # -- audit helpers -----------------------------------------------------------------------------
    def _audit(self, c, now: float, run_id, step_id, event, actor="system", before=None, after=None,
               detail=None, chain=None) -> None:
        """Queue an audit event; it is written with the transaction it belongs to, or not at all.
        ``chain``: chain columns set explicitly (tenant, decision, tool, summary, error)."""
        self._pending.append((run_id, step_id, event, actor, before, after,
                              None if detail is None else dumps(detail), now, chain))

    def _audit_illegal(self, c, exc: IllegalTransition) -> None:
        info = getattr(exc, "info", {})
        c.execute("BEGIN IMMEDIATE")
        self._chain.append(c, [(info.get("run_id"), info.get("step_id"), "illegal_transition",
                                info.get("actor", "system"), info.get("before"), info.get("after"),
                                dumps({"kind": info.get("kind"), "message": str(exc)}), info.get("now", 0.0))])
        c.execute("COMMIT")

    @staticmethod
    def _illegal(kind: str, run_id, step_id, before, after, now, actor="system") -> IllegalTransition:
        what = f"run {run_id}" if kind == "run" else f"step {step_id!r} of run {run_id}"
        exc = IllegalTransition(f"{what} cannot go from {before!r} to {after!r}; see interpreter/states.py for the "
                                f"legal transitions")
        exc.info = {"kind": kind, "run_id": run_id, "step_id": step_id, "before": before, "after": after,
                    "now": now, "actor": actor}
        return exc

    def _step_to(self, c, now, run_id, step_id, before, after, actor="system", detail=None, chain=None, *,
                 slots: bool = True) -> None:
        """Move a step (``slots``: False when the attempt can hold no lock or pool slot, see Commit.holds_slots)."""
        if not states.step_can(before, after):
            raise self._illegal("step", run_id, step_id, before, after, now, actor)
        if before != after:
            self._audit(c, now, run_id, step_id, "step." + after, actor, before, after, detail, chain)
        if slots and before == "running" and after != "running":  # locks and pools: the attempt's slots go back
            sqlite_slots.release_attempt(c, now, run_id, step_id)

    def _run_to(self, c, now, run_id, before, after, actor="system", detail=None) -> None:
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
            # children in flight stop too (store/sqlite/children.py)
            self._fanout_moved(c, now, run_id, after, ends, (detail or {}).get("error_class"), actor)

    def slots(self, now: float, name: str | None = None) -> list:
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
            c.execute("INSERT OR IGNORE INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?)",
                      (digest, workflow, version, body_json, now))

    def get_plan(self, digest: str) -> str:
        got = self._read("SELECT body FROM plans WHERE digest = ?", (digest,))
        if not got:
            raise NotFound(f"no plan with digest {digest} in {self.url}; was the run submitted to another store?")
        return got[0][0]

    def _get_run(self, c, run_id: str) -> RunRecord:
        row = c.execute(f"SELECT {rows.RUN_COLS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}; list runs with `sealflow status`")
        return rows.run(row)

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            return self._get_run(self._conn, run_id)

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

    def submit(self, new: NewRun, now: float, limits=None, definition=None) -> tuple[RunRecord, bool]:
        return self._submit_recorded(new, now, limits, definition, None)[:2]

    def submit_claimed(self, new: NewRun, now: float, limits=None, definition=None, *, owner: str
                       ) -> tuple[RunRecord, bool, Claimed | None]:
        return self._submit_recorded(new, now, limits, definition, owner)

    def _submit_recorded(self, new: NewRun, now: float, limits, definition, owner: str | None
                         ) -> tuple[RunRecord, bool, Claimed | None]:
        try:
            return self._submit(new, now, limits, definition, owner)
        except DefinitionRefused as exc:  # the transaction was rolled back: only the refusal is recorded
            self.audit_definition_refused(definition, exc, now, tenant=new.tenant)
            raise

    def _submit(self, new: NewRun, now: float, limits, definition, owner: str | None
                ) -> tuple[RunRecord, bool, Claimed | None]:
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
            c.execute("INSERT OR IGNORE INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?)",
                      (new.plan_digest, new.workflow, new.workflow_version, new.plan_json, now))
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
