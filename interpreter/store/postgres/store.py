"""The PostgreSQL store (``postgresql://user:pass@host:5432/db``): psycopg 3 with a connection pool.

It is the shared statement code (:class:`~sealflow.store.sql.store.SqlStore`: claim, commit, cancel, redrive,
the sweep's steps, the audit chain, admission, the definition registry, in SQL both databases accept as it
is) on PostgreSQL's transactions, so both backends keep one implementation of every rule; it does not
inherit the SQLite store. What differs is here:

* **Transactions.** Every state change is one transaction on a pooled connection, fenced by the claim token
  and the run's revision as on SQLite. Audit events are hash-chained inside the transaction that appends
  them, and nearly every write moves its tenant's chain head, so the writers are serial, as on SQLite: they
  queue on one session advisory lock taken before their snapshot and released after their commit, and run
  ``REPEATABLE READ`` (a snapshot taken after the lock sees every earlier writer; the ``SERIALIZABLE``
  writers of earlier versions aborted one another by the thousand without the lock, and paid for predicate
  locks that could find nothing with it). A writer that meets a row changed meanwhile by a transaction that
  does not take the lock (handing out due outbox rows) gets a serialization failure and is run again from the
  start (a fresh read, so the fences decide again). The writers of one process share commits (group commit,
  :mod:`.batching`, on a connection in pipeline mode), so that a WAL flush is paid per batch, not per write.
* **Due work.** :meth:`take_outbox` and :meth:`sweep` pick their rows with ``FOR UPDATE SKIP LOCKED``:
  two dispatchers or sweepers never take the same row, and neither waits for the other.
* **Clock** (:mod:`.dbclock`). ``clock=db`` (the default) stamps leases, timers and every ``now`` on the
  database's clock: the store measures the offset of the database's ``clock_timestamp()`` from this host
  every few seconds and shifts ``now`` and the due times the engine computed (``due_at``, deadlines) by it,
  so clock skew between hosts cannot break a lease. ``clock=caller`` takes ``now`` as given (tests on a fake clock).
* **Wake-ups.** An outbox row written unsent notifies channel ``sealflow_work`` at commit;
  :meth:`wait_for_work` blocks on it (``LISTEN``) instead of polling.
* **Liveness.** Workers heartbeat in the store (:meth:`heartbeat`); :meth:`dead_workers` names owners
  whose heartbeat is older than a limit on the database clock. No host name or pid is involved. A worker on
  Redis records its Dramatiq broker id with its beats (:mod:`~sealflow.store.postgres.workers`).
* **Errors.** A lost or refused connection is a :class:`StoreUnavailable` naming the store (password
  masked) and the cause; a statement the database refuses (a constraint) a :class:`StoreError` saying so.
  Either way the transaction in flight rolled back, so nothing half-done is left.

URL parameters besides libpq's: ``schema=NAME`` (search_path), ``clock=db|caller``, ``migrate=1``
(apply missing migrations on open; otherwise an older schema is refused: run ``sealflow store migrate``),
``pool_max=N``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from sealflow.core.clock import SYSTEM, Clock
from sealflow.store.auditchain import SqliteChain
from sealflow.store.base import operations
from sealflow.store.deliveries import DeliveryRecord
from sealflow.store.errors import IllegalTransition, InvalidOperation, StoreError
from sealflow.store.postgres import schema
from sealflow.store.postgres.batching import GroupCommit
from sealflow.store.postgres.chainlink import PgChain
from sealflow.store.postgres.connection import (
    StoreUnavailable,
    connect,
    mask,
    split_url,
)
from sealflow.store.postgres.connection import (
    cause as _cause,
)
from sealflow.store.postgres.connection import (
    conn_kwargs as _conn_kwargs,
)
from sealflow.store.postgres.connection import (
    own_params as _own_params,
)
from sealflow.store.postgres.dbclock import DbClockMixin
from sealflow.store.postgres.dialect import PendingEvent, PgConn, Row
from sealflow.store.postgres.hotpath import HotPathMixin
from sealflow.store.postgres.pooling import StorePool
from sealflow.store.postgres.sessions import PgSessionsMixin
from sealflow.store.postgres.workers import WorkersMixin
from sealflow.store.records import Due, Message, RunRecord, SweepReport
from sealflow.store.sql import rows
from sealflow.store.sql.store import SqlStore

_CURSOR = rows.CURSOR
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)
CHANNEL = "sealflow_work"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _io(method: Callable[Concatenate[PostgresStore, _P], _R]) -> Callable[Concatenate[PostgresStore, _P], _R]:
    """Run a store operation; retry it whole on a serialization failure; turn I/O errors into clear ones."""

    @functools.wraps(method)
    def run(self: PostgresStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for attempt in range(self.max_retries):
            try:
                return method(self, *args, **kwargs)
            except _RETRYABLE:
                time.sleep(min(0.002 * (2 ** attempt), 0.1))
            except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
                raise StoreUnavailable(f"PostgreSQL store {self.url}: {method.__name__} failed, nothing was "
                                       f"changed: {_cause(exc)}") from None
            except psycopg.Error as exc:  # refused by the database (a constraint, ...): not an outage
                raise StoreError(f"PostgreSQL store {self.url}: {method.__name__} refused by the database, nothing "
                                 f"was changed: {type(exc).__name__}: {_cause(exc)}") from None
        raise StoreUnavailable(f"PostgreSQL store {self.url}: {method.__name__} kept conflicting with concurrent "
                               f"transactions ({self.max_retries} tries); nothing was changed, try again")

    return run


class PostgresStore(HotPathMixin, DbClockMixin, PgSessionsMixin, WorkersMixin, SqlStore):
    """:class:`~sealflow.store.base.Store` on one PostgreSQL database (or schema)."""

    max_retries = 50
    rides_out_outages = True  # a server that restarts or fails over comes back (Store.rides_out_outages)
    _fence_late = True  # Commit.seen: the fence's read arrives with the commit's others (sql/steps.py)

    def __init__(self, url: str, *, migrate: bool | None = None, clock: Clock | None = None,
                 clock_mode: str | None = None, pool_max: int | None = None):
        conninfo, own = split_url(url)
        self.url = mask(url)
        self.clock: Clock = clock or SYSTEM  # the caller's clock (Store.clock); dbclock.py moves it onto the database's
        self.clock_mode = clock_mode or own.get("clock", "db")
        if self.clock_mode not in ("db", "caller"):
            raise StoreError(f"PostgreSQL store {self.url}: clock={self.clock_mode!r}; use clock=db or clock=caller")
        asked, own_pool = _own_params(own, self.url)
        if migrate is None:
            migrate = asked
        kwargs = _conn_kwargs(own)
        self._conninfo, self._kwargs = conninfo, kwargs
        # events' content hashed here, linked to their tenants' chains by the database (chainlink.py)
        self._chain = PgChain(SqliteChain(cache_heads=False))
        self._offset_at, self._offset_s = 0.0, 0.0
        self._listener: psycopg.Connection | None = None
        self._listen_lock = threading.Lock()
        with self._connect() as conn:
            try:
                if migrate:
                    schema.migrate(conn, self.url, schema=own.get("schema"))
                self._version = schema.check(conn, self.url)
            except psycopg.Error as exc:
                raise StoreUnavailable(f"PostgreSQL store {self.url}: cannot read or migrate its schema: "
                                       f"{_cause(exc)}") from None
        if self._version < schema.LATEST:
            raise schema.SchemaTooOld(
                f"PostgreSQL store {self.url} is at schema version {self._version}, this sealflow needs "
                f"{schema.LATEST}; migrate it first: `sealflow store migrate --store URL`, or add "
                "?migrate=1 to the store URL")
        self._group = GroupCommit(self._live_pool, self._chain.append, self._illegal_in_batch)
        self._hot_init(self._live_pool)
        size = int(pool_max or own_pool or 8)
        self._pool: StorePool | None = StorePool(conninfo, min_size=1, max_size=size, kwargs=kwargs, open=False,
                                                 name="sealflow-store")
        try:
            self._pool.open(wait=True, timeout=10)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(f"PostgreSQL store {self.url}: its connection pool did not fill in 10 s: "
                                   f"{_cause(exc)}") from None

    # -- connections and transactions -------------------------------------------------------------
    def _connect(self) -> psycopg.Connection:
        return connect(self._conninfo, self._kwargs, self.url)

    def _pending_of(self, c: PgConn) -> list[PendingEvent]:
        """The audit events queued in the transaction ``c`` is in: its own (``PgConn.pending``)."""
        return c.pending

    def close(self) -> None:
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.close()
        with self._listen_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None

    def schema_version(self) -> int:
        return self._version

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        if self._pool is None:
            raise InvalidOperation("the store is closed; open it again with open_store(url)")
        with self._pool.connection() as conn:
            yield conn


    def _live_pool(self) -> ConnectionPool:
        if self._pool is None:
            raise InvalidOperation("the store is closed; open it again with open_store(url)")
        return self._pool

    @contextlib.contextmanager
    def _tx(self, isolation: str = "WRITER") -> Iterator[PgConn]:
        if isolation == "WRITER":  # the writers: serial, sharing commits (batching.py)
            with self._group.transaction() as c:
                yield c
            return
        with self._conn() as raw:
            c = PgConn(raw)
            pending = c.pending
            raw.execute(f"BEGIN ISOLATION LEVEL {isolation}")
            try:
                yield c
                if pending:
                    self._chain.append(c, pending)
            except BaseException:
                pending.clear()
                if not raw.closed and raw.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                    raw.execute("ROLLBACK")
                raise
            pending.clear()
            raw.execute("COMMIT")

    def _illegal_in_batch(self, c: PgConn, exc: IllegalTransition) -> None:
        """The audit event of an illegal transition, in the batch transaction its operation was undone in."""
        self._chain.append(c, [self._illegal_event(exc)])

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]:
        with self._conn() as raw:
            return PgConn(raw).execute(sql, args).fetchall()

    def get_run(self, run_id: str) -> RunRecord:
        with self._conn() as raw:
            return self._get_run(PgConn(raw), run_id)

    def tenant_usage(self, tenant: str, day: int) -> tuple[int, float]:
        got = self._read("SELECT tokens, cost_usd FROM tenant_usage WHERE tenant = ? AND day = ?", (tenant, day))
        return (got[0][0], got[0][1]) if got else (0, 0.0)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[PgConn]:
        """Reads in one transaction (one snapshot of the database)."""
        with self._tx("REPEATABLE READ READ ONLY") as c:
            yield c

    # -- due work: FOR UPDATE SKIP LOCKED ----------------------------------------------------------------
    def take_due(self, now: float, limit: int = 256) -> list[Due]:
        now, _ = self._on_db_clock(now)
        if not self._read(self._OUTBOX_DUE, (now,)):  # nothing due: one round trip, not a transaction's three
            return []
        with self._tx("READ COMMITTED") as c:  # touches only outbox rows it holds locked
            got = c.native("SELECT o.run_id, o.step_id, o.attempt, o.token, r.tenant, r.priority FROM outbox o "
                           "JOIN runs r ON r.id = o.run_id WHERE o.sent_at IS NULL AND o.due_at <= %s "
                           f"ORDER BY {rows.PRIORITY_RANK}, o.due_at LIMIT %s FOR UPDATE OF o SKIP LOCKED",
                           (now, limit)).fetchall()
            if got:
                c.executemany("UPDATE outbox SET sent_at = ? WHERE run_id = ? AND step_id = ? AND attempt = ? AND "
                              "token = ?", [(now, *r[:4]) for r in got])
        return [Due(Message(*r[:5]), r[5]) for r in got]

    _LOCK_DELIVERIES = " FOR UPDATE SKIP LOCKED"

    def take_deliveries(self, limit: int = 50, lease: float = 60.0) -> list[DeliveryRecord]:
        now = self._now()
        with self._tx("READ COMMITTED") as c:  # touches only the rows it holds locked
            return self._take_deliveries(c, now, limit, lease)

    def settle_delivery(self, taken: DeliveryRecord, *, state: str, next_at: float | None = None,
                        error: str | None = None, actor: str = "notifier") -> bool:
        db, shift = self._on_db_clock(self.clock.now())  # next_at: computed on the store's clock, moved with it
        return self._settle_delivery(taken, db, state, None if next_at is None else next_at + shift, error, actor)

    # the sweep is the SQLite store's (sql/sweep.py), on the database clock, taking due rows with
    # FOR UPDATE ... SKIP LOCKED so that concurrent sweepers never take the same one
    _LOCK_EXPIRED = " FOR UPDATE OF a, r SKIP LOCKED"
    _LOCK_TIMERS = " FOR UPDATE SKIP LOCKED"

    def sweep(self, now: float, *, redeliver_after: float = 60.0, limit: int = 500) -> SweepReport:
        now, _ = self._on_db_clock(now)
        return super().sweep(now, redeliver_after=redeliver_after, limit=limit)

    def next_due(self, run_id: str, *, redeliver_after: float = 60.0) -> float | None:
        with self._conn() as raw:
            got = raw.execute(
                "SELECT MIN(x) FROM ("
                " SELECT MIN(fire_at) AS x FROM timers WHERE run_id = %(r)s"
                " UNION ALL SELECT MIN(due_at) FROM outbox WHERE run_id = %(r)s AND sent_at IS NULL"
                " UNION ALL SELECT MIN(sent_at) + %(d)s FROM outbox WHERE run_id = %(r)s AND sent_at IS NOT NULL"
                f" UNION ALL SELECT a.lease_expires FROM runs r JOIN attempts a ON {_CURSOR} WHERE r.id = %(r)s "
                "AND a.state = 'running') t", {"r": run_id, "d": float(redeliver_after)}).fetchone()
        assert got is not None  # an aggregate: one row
        return cast("float | None", got[0])

    # -- wake-ups and heartbeats ------------------------------------------------------------------------
    def wait_for_work(self, timeout: float) -> bool:
        """Block until an outbox row is written unsent (any process) or ``timeout`` s pass; True if woken.
        The first call starts listening, so work written before it is found by the caller's next poll."""
        with self._listen_lock:
            if self._listener is None:
                self._listener = self._connect()
                self._listener.execute(f"LISTEN {CHANNEL}")
                return False
            woke = False
            try:
                for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                    woke = True
            except psycopg.Error as exc:  # the next call listens again on a new connection
                self._listener.close()
                self._listener = None
                raise StoreUnavailable(f"PostgreSQL store {self.url}: listening for new work failed: "
                                       f"{_cause(exc)}") from None
            return woke


# every public operation: retried whole on a serialization failure, I/O errors made clear. The operations are
# the store protocols' (all of them, store/base.py PROTOCOLS: one added there is wrapped here without a list to
# forget it in) and the optional capabilities this backend has (heartbeats, usage reservations)
_OPERATIONS = sorted(operations() - {"close", "schema_version"}
                     | {"heartbeat", "dead_workers", "silent_brokers", "forget_broker", "reserve_usage",
                        "release_usage", "reserved_usage"})
for _name in _OPERATIONS:
    setattr(PostgresStore, _name, _io(getattr(PostgresStore, _name)))
del _name
