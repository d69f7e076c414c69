"""The SQLite store's file on disk: which SQLite errors are the file's fault (disk full, read-only, I/O,
locked) and what to do about them, and keeping the write-ahead log bounded under sustained load.

:class:`WalMixin` is a mixin of :class:`~sealflow.store.sqlite.store.SqliteStore`: after a commit
past ``WAL_LIMIT`` it checkpoints and restarts the WAL between the store's own transactions, and the file is
cut back to the limit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

#: the WAL size a store keeps to under sustained load (bytes): past it a checkpoint restarts it and the file is
#: cut back to it
WAL_LIMIT = 16 * 1024 * 1024
#: how long the restarting checkpoint waits for readers and writers before it gives way (ms)
_RESTART_WAIT_MS = 50
#: after a restart readers kept from finishing, how long commits go on before the next try (s)
_RESTART_PAUSE_S = 0.2
#: SQLite messages that mean the file cannot be written or read, not a bug in the statement
_IO_WORDS = ("disk is full", "readonly", "read-only", "disk i/o error", "unable to open", "database is locked",
             "malformed", "no such file", "out of memory")


def io_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the file's fault (disk full, read-only, I/O, locked) rather than the statement's."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(w in text for w in _IO_WORDS)


def hint(exc: BaseException) -> str:
    """What to do about an I/O failure of the store's file (said after the error)."""
    text = str(exc).lower()
    if "full" in text:
        return "free disk space (or prune finished runs: `sealflow store prune --older-than 30d`), then retry"
    if "readonly" in text or "read-only" in text:
        return "make the file and its directory writable by this user (the WAL needs both), then retry"
    if "locked" in text:
        return "another process held the write lock past the busy timeout; retry, or raise busy_timeout_ms"
    return "check the file system the store lives on, then retry"


def wal_size(path: str) -> int:
    """Bytes in the store's write-ahead log (0 if none)."""
    try:
        return os.path.getsize(path + "-wal")
    except OSError:
        return 0


class Checkpointer(threading.Thread):
    """Checkpoints the WAL every ``interval`` seconds (PASSIVE: never blocks writers, so their commits do
    not wait on its fsync). Under sustained load PASSIVE may never reach the WAL's end; the store then
    restarts it between its own transactions once it is past the limit (``SqliteStore._bound_wal``)."""

    def __init__(self, path: str, interval: float, busy_timeout_ms: int, lock: threading.Lock):
        super().__init__(name="sealflow-checkpoint", daemon=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                     timeout=busy_timeout_ms / 1000)
        self._interval = interval
        #: held by whichever of this process's checkpoints runs (this thread's, or the store's restart):
        #: SQLite answers a second concurrent checkpoint with SQLITE_BUSY at once, which would make the store's
        #: restart give way to its own background checkpoint while the WAL grows
        self._lock = lock
        self._stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            if not self._lock.acquire(blocking=False):  # the store is restarting the WAL: that does it
                continue
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:  # busy or closing: the next round does it
                pass
            finally:
                self._lock.release()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self._conn.close()


class WalMixin:
    """The WAL bound of :class:`~sealflow.store.sqlite.store.SqliteStore` (its ``path``,
    ``_wal_limit``, ``_busy_ms`` and ``_restart_after``)."""

    path: str
    _wal_limit: int
    _busy_ms: int
    _restart_after: float
    _checkpointing: threading.Lock

    def _bound_wal(self, c: sqlite3.Connection) -> None:
        """After a commit, past the limit (writes outran the background checkpoints, or readers kept them
        from reaching the WAL's end): checkpoint the whole WAL here and restart it, between this process's
        transactions, waiting at most a moment for other processes' readers. If they are still in the way,
        commits go on undisturbed for a moment and the next one past it tries again.

        RESTART, not TRUNCATE: the next commit writes the WAL over from its beginning, and SQLite cuts the
        file back to ``journal_size_limit`` (the same limit) as it does. Writing over the file's own blocks
        costs less than growing a file cut to zero every time (a step on the embedded default, measured:
        about 40 us less; docs/benchmarks.md, eleventh round); the store's close still truncates it to zero."""
        if wal_size(self.path) <= self._wal_limit or time.monotonic() < self._restart_after:
            return
        busy = 1
        try:
            with self._checkpointing:  # after this process's background checkpoint, if one runs (a moment)
                c.execute(f"PRAGMA busy_timeout = {_RESTART_WAIT_MS}")
                busy = c.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
        except sqlite3.Error:
            pass
        finally:
            c.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        if busy:
            self._restart_after = time.monotonic() + _RESTART_PAUSE_S
