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
import os
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from sealflow.core.clock import SYSTEM, Clock
from sealflow.store.auditchain import SqliteChain
from sealflow.store.base import RunRecord
from sealflow.store.errors import IllegalTransition, InvalidOperation, StoreError, StoreUnavailable
from sealflow.store.sql.conn import Row
from sealflow.store.sql.store import SqlStore
from sealflow.store.sqlite.disk import (  # noqa: F401 - wal_size re-exported (tests, benchmarks)
    WAL_LIMIT,
    Checkpointer,
    WalMixin,
    hint,
    io_failure,
    wal_size,
)
from sealflow.store.sqlite.schema import migrate

# The sqlite3 module binds int, float, str and bytearray directly, but sends every other parameter through
# its adaptation protocol, which for None and bool (every NULL column and flag a step writes) fails two
# attribute lookups, each building and dropping an AttributeError: about a third of a bound statement's cost
# here. With an adapter registered for each, the lookup is one dict hit, and the values bind exactly as
# before (None as NULL, a bool as its integer). Process-wide, but neutral for any other user of sqlite3:
# neither type is one whose registration makes the module adapt every value (int, float, str, bytearray).
sqlite3.register_adapter(type(None), lambda _: None)
sqlite3.register_adapter(bool, int)


class SqliteStore(WalMixin, SqlStore):
    """The store on one SQLite file: the shared statement code (:class:`~sealflow.store.sql.store.SqlStore`) on one
    connection, its transactions ``BEGIN IMMEDIATE``; every protocol of :data:`sealflow.store.base.PROTOCOLS` (the
    runtime's :class:`~sealflow.store.base.Store` and the server's :class:`~sealflow.store.serverstate.ServerStore`)."""

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
        self._pending: list[Row] = []  # audit rows of the transaction in progress
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

    def _pending_of(self, c: sqlite3.Connection) -> list[Row]:
        """The audit events queued in the transaction ``c`` is in: the store's own list (one writer at a time)."""
        return self._pending

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

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]:
        with self._lock:
            if self._conn is None:
                raise InvalidOperation("the store is closed; open it again with open_store(url)")
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                if io_failure(exc):
                    raise self._unavailable(exc, "a read") from None
                raise

    def _audit_illegal(self, c: sqlite3.Connection, exc: IllegalTransition) -> None:
        c.execute("BEGIN IMMEDIATE")
        self._chain.append(c, [self._illegal_event(exc)])
        c.execute("COMMIT")

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            return self._get_run(self._conn, run_id)
