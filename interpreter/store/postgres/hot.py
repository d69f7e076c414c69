"""The hot path's batches: one process's hot writes (:mod:`.hotsql`) sent together, one statement a batch.

Whoever finds no statement in flight sends every item queued (its own among them) as one call of
``sealflow_hot_batch`` on a pooled connection, in its own transaction; the items that arrive meanwhile wait
and go with the next call, which the first of them sends once the answer is in. So hot writes share a
database commit (a WAL flush) as the writers of :mod:`.batching` do, at one statement and one round trip a
batch, with the writers' lock held only while the database works; a waiting writer costs its thread one
wake-up.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from sealflow.store.errors import StoreError
from sealflow.store.postgres.hotsql import CALL

_T = TypeVar("_T")

#: items of one statement at most; the rest wait for the next
MAX_ITEMS = 64
#: the items as one JSON text (a float's shortest repr is read back exactly by float8's input)
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
#: SQLSTATEs an item may be answered with that mean "run the whole operation again" (as the store's wrapper does)
_AGAIN: dict[str, type[psycopg.Error]] = {"40001": pg_errors.SerializationFailure, "40P01": pg_errors.DeadlockDetected}


class HotFailed(StoreError):
    """The database refused an item (its SQLSTATE and message): nothing of it was written; the caller runs the
    change the shared way, which reports it as that way would."""


class GoGeneral(StoreError):
    """The item needs what only the shared code does (a refusal to audit, slots, a fan-out...): nothing of it
    was written; the caller runs the change the shared way."""


def raise_error(text: str) -> None:
    """Raise what an ``error`` answer says: a conflict to run again, else :class:`HotFailed`."""
    sqlstate, _, message = text.partition(" ")
    again = _AGAIN.get(sqlstate)
    if again is not None:
        raise again(message)
    raise HotFailed(f"the database refused the change ({sqlstate}): {message}")


def is_statement_error(exc: BaseException) -> bool:
    """Whether ``exc`` (from the batch an item was sent in) is a statement's error rather than the database
    being away: the change is then run the shared way, which reports it if it is its own."""
    return isinstance(exc, psycopg.Error) and not isinstance(
        exc, (psycopg.OperationalError, psycopg.InterfaceError, pg_errors.SerializationFailure,
              pg_errors.DeadlockDetected))


class _Entry:
    __slots__ = ("item", "resolve", "ready", "lead", "result", "error")

    def __init__(self, item: dict[str, Any], resolve: Callable[[dict[str, Any]], Any]) -> None:
        self.item, self.resolve = item, resolve
        #: released once the entry is answered, or is to send the next statement (a lock held from the start: a
        #: hand-off in C, where an Event is a Condition's Python)
        self.ready = threading.Lock()
        self.ready.acquire()
        self.lead = False  # woken to send the next statement, not with its answer
        self.result: Any = None
        self.error: BaseException | None = None


class HotQueue:
    """The hot writes of one process (see the module docstring)."""

    def __init__(self, pool: Callable[[], ConnectionPool]) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._busy = False

    def submit(self, item: dict[str, Any], resolve: Callable[[dict[str, Any]], _T]) -> _T:
        """Send ``item`` (in a batch); ``resolve(answer)`` makes the result of its answer, or raises (the
        change's own refusal; :class:`GoGeneral`). Raises the statement's error when the call failed whole."""
        entry = _Entry(item, resolve)
        with self._lock:
            self._queue.append(entry)
            lead = not self._busy
            self._busy = True
        if not lead:
            entry.ready.acquire()
        if lead or entry.lead:
            self._send()
        if entry.error is not None:
            raise entry.error
        return cast("_T", entry.result)  # what ``resolve`` made of its answer

    def _send(self) -> None:
        with self._lock:
            batch, self._queue = self._queue[:MAX_ITEMS], self._queue[MAX_ITEMS:]
        try:
            self._call(batch)
        finally:
            with self._lock:
                nxt = self._queue[0] if self._queue else None
                if nxt is None:
                    self._busy = False
            for entry in batch:
                if entry.ready.locked():  # (the one that sent it never waited)
                    entry.ready.release()
            if nxt is not None:  # the next statement is sent by the first of those who waited for this one
                nxt.lead = True
                nxt.ready.release()

    def _call(self, batch: list[_Entry]) -> None:
        try:
            pool = self._pool()
            raw = pool.getconn()
        except BaseException as exc:  # noqa: BLE001 - every item of the batch is told
            for entry in batch:
                entry.error = exc
            return
        try:
            got = raw.execute(CALL, (_dumps([e.item for e in batch]),)).fetchall()
        except BaseException as exc:  # noqa: BLE001 - every item of the batch is told
            for entry in batch:
                entry.error = exc
            return
        finally:
            pool.putconn(raw)
        if len(got) != len(batch):  # (never: the function answers every item)
            error = HotFailed(f"a batch of {len(batch)} hot writes got {len(got)} answers")
            for entry in batch:
                entry.error = error
            return
        for entry, (answer,) in zip(batch, got, strict=True):
            try:
                if answer["s"] == "error":
                    raise_error(answer["e"])
                if answer["s"] == "general":
                    raise GoGeneral("the change needs the shared way")
                entry.result = entry.resolve(answer)
            except Exception as exc:  # noqa: BLE001 - this item's own
                entry.error = exc
