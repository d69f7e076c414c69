"""Group commit: the PostgreSQL store's concurrent write transactions of one process share one database commit.

Every write transaction appends to its tenant's audit chain, so writers are serial (they queue on an advisory
lock taken before their snapshot: :data:`WRITERS_LOCK`), and a durable commit costs a WAL flush (about 4 ms
on the development machine). Serial writers that each flush would cap a process at a few hundred writes a
second. Instead, the threads that want to write while a batch is being opened join it: the first (the
*leader*) takes a pooled connection, the lock and ``BEGIN ISOLATION LEVEL SERIALIZABLE``; each member then
runs its whole operation, one at a time, inside its own ``SAVEPOINT``; the leader chains the audit events of
the members that succeeded (in their order: one insert and one move of each tenant's head) and commits once
all members are done, and every member returns only after that commit. The result is exactly a serial order
of the members' operations, as on SQLite:

* a member whose operation raises (a fencing refusal, an illegal transition, a bug) is rolled back to its
  savepoint alone and gets its own exception after the batch commits (an illegal transition's audit event
  is written in the batch, as it is in a transaction of its own otherwise);
* when the commit fails (the database went away, a serialization failure), every member gets that error and
  its operation is retried whole or reported by the store's usual wrapper: nothing of the batch is kept.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import psycopg

from sealflow.interpreter.store.errors import IllegalTransition
from sealflow.interpreter.store.postgres.dialect import PgConn

#: the session advisory lock every SERIALIZABLE write transaction holds from before its snapshot to after its
#: commit (an arbitrary constant key: "sealflow" in ASCII)
WRITERS_KEY = 0x7365616C666C6F77
WRITERS_LOCK = f"SELECT pg_advisory_lock({WRITERS_KEY})"
WRITERS_UNLOCK = f"SELECT pg_advisory_unlock({WRITERS_KEY})"


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
    __slots__ = ("conn", "ready", "done", "error", "members", "mutex", "events")

    def __init__(self) -> None:
        self.conn: psycopg.Connection | None = None
        self.ready = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.members = 1
        self.mutex = threading.Lock()
        #: the audit events of the members that succeeded, chained together before the commit
        self.events: list = []


class GroupCommit:
    """The batches of one store (see the module docstring)."""

    def __init__(self, pool: Callable[[], object], chain_append: Callable[[PgConn, list], None],
                 pending: Callable[[], list], illegal: Callable[[PgConn, IllegalTransition], None]):
        self._pool, self._append, self._pending, self._illegal = pool, chain_append, pending, illegal
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
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

    def _leave(self, pool, batch: _Batch, leader: bool) -> None:
        """A member is done: the leader waits for the others, then commits; the others wait for that."""
        with self._lock:
            batch.members -= 1
            if leader:
                if self._open is batch:
                    self._open = None  # who comes now opens the next batch (it waits for this one's commit)
                while batch.members:
                    self._idle.wait()
            elif not batch.members:
                self._idle.notify_all()
        if leader:
            self._commit(pool, batch)
        else:
            batch.done.wait()

    def _begin(self, pool, batch: _Batch) -> None:
        try:
            raw = pool.getconn()
        except BaseException as exc:
            batch.error = exc
            batch.ready.set()
            return
        try:
            raw.execute(WRITERS_LOCK)
            raw.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            batch.conn = raw
        except BaseException as exc:
            batch.error = exc
            unlock_writers(raw)
            pool.putconn(raw)  # closed if it could not let go of the lock: the pool drops it
        batch.ready.set()

    def _member(self, batch: _Batch):
        """Run one member's operation (the caller's ``with`` body) in a savepoint; return its exception."""
        raw = batch.conn
        assert raw is not None
        c = PgConn(raw)
        pending = self._pending()
        pending.clear()
        if batch.error is not None:  # an earlier member broke the transaction: fail with it
            try:
                yield c
            except BaseException as exc:  # noqa: BLE001 - the batch's error is raised instead
                return exc
            return None
        raw.execute("SAVEPOINT member")
        try:
            yield c
            raw.execute("RELEASE SAVEPOINT member")
            batch.events.extend(pending)  # chained with the others' at the commit (one insert, one head move)
        except IllegalTransition as exc:
            pending.clear()
            self._undo(batch)
            if batch.error is None:
                try:
                    self._illegal(c, exc)
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
        raw = batch.conn
        assert raw is not None
        try:
            raw.execute("ROLLBACK TO SAVEPOINT member")
            raw.execute("RELEASE SAVEPOINT member")
        except BaseException as exc:  # noqa: BLE001 - the transaction is lost: the batch fails as a whole
            batch.error = exc

    def _commit(self, pool, batch: _Batch) -> None:
        raw = batch.conn
        try:
            if raw is not None:
                try:
                    if batch.error is None and batch.events:
                        self._append(PgConn(raw), batch.events)
                    if batch.error is None:
                        raw.execute("COMMIT")
                    elif raw.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                        raw.execute("ROLLBACK")
                except BaseException as exc:  # noqa: BLE001 - every member is told
                    if batch.error is None:
                        batch.error = exc
                finally:
                    unlock_writers(raw)
                    pool.putconn(raw)
        finally:
            batch.done.set()


class InBatch:
    """The shared code's own transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) inside a batch that is already
    one: those two statements are left out (the member's savepoint was undone before)."""

    def __init__(self, c: PgConn):
        self._c = c

    def execute(self, sql: str, args=()):
        if sql in ("BEGIN IMMEDIATE", "COMMIT"):
            return None
        return self._c.execute(sql, args)

    def executemany(self, sql: str, seq):
        return self._c.executemany(sql, seq)
