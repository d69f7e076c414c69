"""Group commit: the PostgreSQL store's concurrent write transactions of one process share one database commit.

Every write transaction appends to its tenant's audit chain, so writers are serial: they queue on an advisory
lock taken before their snapshot (:data:`WRITERS_LOCK`) and release it after their commit. Because no two
writers ever overlap, a writer's ``REPEATABLE READ`` snapshot (taken after the lock) sees every earlier
writer's commit and nothing of a later one: the writers run in exactly a serial order, as on SQLite, without
the predicate-lock bookkeeping of ``SERIALIZABLE`` (which could add nothing where no two writers overlap).
The transactions that do not take the lock (handing out due outbox rows and deliveries, ``READ COMMITTED``)
touch only rows they hold locked; a writer whose row such a transaction changed meanwhile gets a
serialization failure and is run again whole (:func:`~sealflow.store.postgres.store._io`).

A durable commit costs a WAL flush (about 4 ms on the development machine); serial writers that each flush
would cap a process at a few hundred writes a second. Instead, the threads that want to write while a batch
is being opened join it: the first (the *leader*) takes a pooled connection, the lock and ``BEGIN``; each
member then runs its whole operation, one at a time, inside its own ``SAVEPOINT``; once the leader is done
nobody joins any more, and whoever is done last (the leader or a member after it: a thread that is running
anyway, so no other thread has to be woken while the writers' lock is held) chains the audit events of the
members that succeeded (in their order: one insert and one move of each tenant's head) and commits; every
member returns only after that commit:

* a member whose operation raises (a fencing refusal, an illegal transition, a bug) is rolled back to its
  savepoint alone and gets its own exception after the batch commits (an illegal transition's audit event
  is written in the batch, as it is in a transaction of its own otherwise);
* when the commit fails (the database went away), every member gets that error and its operation is retried
  whole or reported by the store's usual wrapper: nothing of the batch is kept.

The batch's connection is in **pipeline mode** (libpq's): a statement whose result nobody reads (an insert,
an update, the savepoint) is sent without waiting for the server; a read waits for its own result, and a
member ends with a sync, so that an error of any of its statements is its own and nobody else's. That is
about a third of the client's CPU per statement and a round trip saved per write (see docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Iterator

import psycopg
from psycopg_pool import ConnectionPool

from sealflow.store.errors import IllegalTransition
from sealflow.store.postgres.dialect import PendingEvent, PgConn, PipedConn

#: the session advisory lock every write transaction holds from before its snapshot to after its commit (an
#: arbitrary constant key: "sealflow" in ASCII)
WRITERS_KEY = 0x7365616C666C6F77
WRITERS_LOCK = f"SELECT pg_advisory_lock({WRITERS_KEY})"
WRITERS_UNLOCK = f"SELECT pg_advisory_unlock({WRITERS_KEY})"
#: the writers' isolation: their snapshot is taken after the lock, and no two writers overlap (module docstring)
WRITERS_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ"
#: members of one batch at most: each holds a savepoint (a subtransaction) until the commit, and PostgreSQL
#: tracks 64 subtransactions of a transaction cheaply (beyond, every snapshot in the cluster gets slower)
MAX_MEMBERS = 32


def unlock_writers(raw: psycopg.Connection) -> bool:
    """Let the next writer go. False (the connection closed: its session's lock goes with it) when the
    connection cannot say so; it must then never go back to the pool holding the lock."""
    try:
        if not raw.closed and raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            raw.execute(WRITERS_UNLOCK)
            return True
    except psycopg.Error:
        pass
    raw.close()
    return False


class _Batch:
    __slots__ = ("conn", "pipe", "piping", "ready", "done", "error", "members", "joined", "mutex", "events", "closed")

    def __init__(self) -> None:
        self.conn: psycopg.Connection | None = None
        self.pipe: psycopg.Pipeline | None = None
        self.piping: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        self.ready = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.members = 1  # in it now
        self.joined = 1  # ever
        self.mutex = threading.Lock()
        #: the leader is done: nobody joins any more, and the last one done commits
        self.closed = False
        #: the audit events of the members that succeeded, chained together before the commit
        self.events: list[PendingEvent] = []


class GroupCommit:
    """The batches of one store (see the module docstring)."""

    def __init__(self, pool: Callable[[], ConnectionPool], chain_append: Callable[[PgConn, list[PendingEvent]], None],
                 illegal: Callable[[PgConn, IllegalTransition], None]) -> None:
        self._pool, self._append, self._illegal = pool, chain_append, illegal
        self._lock = threading.Lock()
        self._open: _Batch | None = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PgConn]:
        with self._lock:
            batch = self._open
            leader = batch is None
            if batch is None:
                batch = self._open = _Batch()
            else:
                batch.members += 1
                batch.joined += 1
                if batch.joined >= MAX_MEMBERS:
                    self._open = None  # full: who comes next opens the next batch
        pool = self._pool()
        if leader:
            self._begin(pool, batch)
        else:
            batch.ready.wait()
        own: BaseException | None = None
        try:
            if batch.conn is None:  # the batch could not begin (the database is away): every member is told
                raise batch.error or RuntimeError("the batch did not begin")
            with batch.mutex:
                own = yield from self._member(batch)
        finally:
            self._leave(pool, batch, leader)
        if batch.error is not None:
            raise batch.error
        if own is not None:
            raise own

    def _leave(self, pool: ConnectionPool, batch: _Batch, leader: bool) -> None:
        """A member is done. The leader closes the batch to newcomers when it is done; whoever is done last
        once it is closed (the leader, or the member done after it) commits it, on its own thread, while it
        runs anyway (no other thread to wake first, under the writers' lock); the others wait for that."""
        with self._lock:
            batch.members -= 1
            if leader:
                batch.closed = True
                if self._open is batch:
                    self._open = None  # who comes now opens the next batch (it waits for this one's commit)
            last = batch.closed and not batch.members
        if last:
            self._commit(pool, batch)
        else:
            batch.done.wait()

    def _begin(self, pool: ConnectionPool, batch: _Batch) -> None:
        try:
            raw = pool.getconn()
        except BaseException as exc:
            batch.error = exc
            batch.ready.set()
            return
        try:
            piping = raw.pipeline()
            pipe = piping.__enter__()
            try:
                raw.execute(WRITERS_LOCK)
                pipe.sync()  # the lock is held: now the snapshot (a sync apart: BEGIN must start a transaction)
                raw.execute(WRITERS_BEGIN)
            except BaseException:
                with contextlib.suppress(BaseException):
                    piping.__exit__(None, None, None)
                raise
            batch.conn, batch.pipe, batch.piping = raw, pipe, piping
        except BaseException as exc:
            batch.error = exc
            raw.close()  # its session's lock, if it got it, goes with it
            pool.putconn(raw)  # closed: the pool drops it
        batch.ready.set()

    def _member(self, batch: _Batch) -> Generator[PgConn, None, BaseException | None]:
        """Run one member's operation (the caller's ``with`` body) in a savepoint; return its exception. Its audit
        events are queued on its own connection object (``c.pending``)."""
        raw, pipe = batch.conn, batch.pipe
        assert raw is not None and pipe is not None
        c = PipedConn(raw, pipe)
        pending = c.pending
        if batch.error is not None:  # an earlier member broke the transaction: fail with it
            try:
                yield c
            except BaseException as exc:  # noqa: BLE001 - the batch's error is raised instead
                return exc
            return None
        c.execute("SAVEPOINT member")  # no RELEASE: a later member's savepoint of the same name hides it
        try:
            yield c
            if c.sent:  # every statement of this member is done: a failure here is this member's own
                c.sync()
            batch.events.extend(pending)  # chained with the others' at the commit (one statement: chainlink.py)
        except IllegalTransition as exc:
            pending.clear()
            self._undo(batch)
            if batch.error is None:
                try:
                    self._illegal(c, exc)
                    pipe.sync()
                except BaseException as err:  # noqa: BLE001 - the batch cannot commit: every member is told
                    batch.error = err
            return exc
        except BaseException as exc:  # noqa: BLE001 - given back to the member after the batch commits
            pending.clear()
            self._undo(batch)
            return exc
        finally:
            pending.clear()
        return None

    @staticmethod
    def _undo(batch: _Batch) -> None:
        raw, pipe = batch.conn, batch.pipe
        assert raw is not None and pipe is not None
        try:
            with contextlib.suppress(psycopg.DatabaseError):  # a statement of this member failed: already told
                pipe.sync()
            raw.execute("ROLLBACK TO SAVEPOINT member")
            pipe.sync()
        except BaseException as exc:  # noqa: BLE001 - the transaction is lost: the batch fails as a whole
            batch.error = exc

    def _commit(self, pool: ConnectionPool, batch: _Batch) -> None:
        raw, pipe, piping = batch.conn, batch.pipe, batch.piping
        try:
            if raw is None or pipe is None or piping is None:
                return
            unlocked = False
            try:
                if batch.error is None:
                    try:
                        if batch.events:
                            self._append(PipedConn(raw, pipe), batch.events)
                        raw.execute("COMMIT")
                        raw.execute(WRITERS_UNLOCK)
                    finally:  # leaving pipeline mode syncs: one round trip for the commit and the unlock
                        piping.__exit__(None, None, None)
                    unlocked = True
                else:
                    with contextlib.suppress(psycopg.DatabaseError):
                        piping.__exit__(None, None, None)
            except BaseException as exc:  # noqa: BLE001 - every member is told
                if batch.error is None:
                    batch.error = exc
            finally:
                if not unlocked:
                    with contextlib.suppress(psycopg.Error):
                        if not raw.closed and raw.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                                                              psycopg.pq.TransactionStatus.INERROR):
                            raw.execute("ROLLBACK")
                    unlock_writers(raw)  # or closes it, when it cannot say (then its lock goes with it)
                pool.putconn(raw)
        finally:
            batch.done.set()
