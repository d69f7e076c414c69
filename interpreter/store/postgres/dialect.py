"""A psycopg connection that speaks the sqlite3 interface the shared store code uses.

The statements the two backends share (claim, commit, cancel, redrive, the sweep's steps, the audit chain,
admission, the definition registry) are written once, in :mod:`sealflow.store.sqlite` and its mixins, in SQL
both databases accept as it is (upserts are ``ON CONFLICT ... DO``, derived tables are named, a nullable
column is compared with ``IS NULL`` or ``=`` as the value asks; the shared statements of :mod:`sealflow.store.sql`).
Nothing rewrites a statement: :class:`PgConn` hands psycopg each one with its parameter markers in psycopg's
style (``?`` -> ``%s``, a literal ``%`` doubled), the one thing DB-API drivers disagree on. What only one
database can say (SQLite's ``?1`` numbered parameters and PRAGMAs; PostgreSQL's ``FOR UPDATE SKIP LOCKED``,
the ledger functions) is written by that backend in its own methods.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import psycopg
from psycopg.abc import Params


@functools.lru_cache(maxsize=1024)
def markers(sql: str) -> str:
    """``sql`` with psycopg's parameter markers: ``?`` -> ``%s`` (a literal ``%`` doubled first)."""
    return sql.replace("%", "%%").replace("?", "%s")


_json_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

#: a row as psycopg gives it back (its default row factory)
Row = tuple[Any, ...]
#: an audit event queued by a write transaction, before its chain fields: ``(run_id, step_id, event, actor,
#: state_before, state_after, detail JSON text, ts[, chain fields given explicitly])``
#: (:meth:`~sealflow.store.auditchain.SqliteChain.bodies`)
PendingEvent = tuple[Any, ...]


class Rows(Protocol):
    """What a statement gives back, as the shared code reads it: a psycopg cursor, or :class:`_PipedCursor`."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...

    def __iter__(self) -> Iterator[Row]: ...


class PgConn:
    """A psycopg connection seen through the part of the sqlite3 interface the shared code uses:
    ``execute`` (returning a cursor with ``fetchone``/``fetchall``/``rowcount``, iterable) and ``executemany``.

    ``pending``: the audit events the transaction it is in queued (``SqlStore._audit``), appended to their chains
    before its commit; each transaction has its own (a :class:`PgConn` of its own), so no thread's events are
    another's."""

    __slots__ = ("raw", "pending")

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw
        self.pending: list[PendingEvent] = []

    def execute(self, sql: str, args: Iterable[Any] = ()) -> Rows:
        cur = self.raw.cursor()
        cur.execute(markers(sql), tuple(args))
        return cur

    def executemany(self, sql: str, seq: Iterable[Iterable[Any]]) -> Rows | None:
        cur = self.raw.cursor()
        cur.executemany(markers(sql), [tuple(a) for a in seq])
        return cur

    def native(self, sql: str, args: Params | None = ()) -> Rows:
        """Run PostgreSQL SQL as written (``%s`` parameters), untranslated."""
        cur = self.raw.cursor()
        cur.execute(sql, args)
        return cur


#: multi-row inserts of the shared code -> the same rows sent as one JSON array of arrays, unpacked by the
#: server (``jsonb_array_elements``): one text parameter, whatever the rows, so psycopg adapts one string
#: (where one array per column cost it a Python walk of every element to find its type) and the server
#: prepares one statement, not one per row count; ``jsonb`` (parsed once) rather than ``json`` (parsed again
#: at each ``->>``). ``ORDER BY n`` keeps the rows' order (their ids, and so the audit log's append order,
#: follow it). Numbers round-trip exactly: a float is written as its shortest repr, kept as those digits by
#: ``jsonb`` and read back by float8's correctly rounded input. See docs/benchmarks.md, sixth round.
BULK: dict[str, str] = {}


def _json_rows_form(table: str, columns: tuple[tuple[str, str], ...]) -> str:
    names = ", ".join(name for name, _ in columns)
    values = ", ".join(f"(r_.v->>{i})::{kind}" if kind != "text" else f"r_.v->>{i}"
                       for i, (_, kind) in enumerate(columns))
    return (f"INSERT INTO {table} ({names}) SELECT {values} FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY "
            f"AS r_(v, n) ORDER BY r_.n")


def _register_audit() -> None:
    from sealflow.store.auditchain import INSERT

    kinds = {"ts": "float8", "workflow_version": "int8", "seq": "int8"}
    names = INSERT[INSERT.index("(") + 1:INSERT.index(")")].split(", ")
    BULK[INSERT] = _json_rows_form("audit", tuple((n, kinds.get(n, "text")) for n in names))


_register_audit()

#: PostgreSQL takes at most 65,535 parameters a statement
_MAX_PARAMS = 65_535


@functools.lru_cache(maxsize=64)
def _one_row(sql: str) -> tuple[str, str] | None:
    """``(head, row)`` of an ``INSERT INTO t (cols) VALUES (?, ...)`` of one row of parameters, else None."""
    head, sep, row = sql.partition(" VALUES ")
    if not sep or not head.startswith("INSERT INTO ") or row.replace("?", "").replace(",", "").replace(" ", "") != "()":
        return None
    return head + sep, row


class _PipedCursor:
    """A cursor of a statement sent in pipeline mode. Its rows or row count are waited for when asked, with a
    sync: everything sent before it is then done too (its errors raised here), in one round trip."""

    __slots__ = ("_cur", "_conn")

    def __init__(self, cur: psycopg.Cursor[Row], conn: PipedConn) -> None:
        self._cur, self._conn = cur, conn

    def _ready(self) -> psycopg.Cursor[Row]:
        if self._cur.pgresult is None:
            self._conn.sync()
        return self._cur

    @property
    def rowcount(self) -> int:
        return self._ready().rowcount

    def fetchone(self) -> Row | None:
        return self._ready().fetchone()

    def fetchall(self) -> list[Row]:
        return self._ready().fetchall()

    def __iter__(self) -> Iterator[Row]:
        return iter(self._ready())


class PipedConn(PgConn):
    """:class:`PgConn` on a connection in pipeline mode (:mod:`.batching`): a statement is sent without waiting
    for the server; only a read (or a row count) waits, for everything sent so far. ``sent`` says whether
    anything was sent since the last sync."""

    __slots__ = ("pipe", "sent")

    def __init__(self, raw: psycopg.Connection, pipe: psycopg.Pipeline) -> None:
        self.raw, self.pipe, self.sent = raw, pipe, False
        self.pending: list[PendingEvent] = []

    def sync(self) -> None:
        self.sent = False
        self.pipe.sync()

    def execute(self, sql: str, args: Iterable[Any] = ()) -> _PipedCursor:
        return self.native(markers(sql), tuple(args))

    def native(self, sql: str, args: Params | None = ()) -> _PipedCursor:
        cur = self.raw.cursor()
        cur.execute(sql, args)
        self.sent = True
        return _PipedCursor(cur, self)

    def executemany(self, sql: str, seq: Iterable[Iterable[Any]]) -> _PipedCursor | None:
        """One statement (an ``INSERT ... VALUES (...)`` of all the rows at once), or each queued (psycopg's own
        ``executemany`` would end with a sync: a round trip)."""
        rows_of: list[tuple[Any, ...]] = [tuple(a) for a in seq]
        if not rows_of:
            return None
        bulk = BULK.get(sql)
        if bulk is not None:  # every row in one JSON text (one parameter, whatever the rows)
            return self.native(bulk, (_json_dumps(rows_of),))
        one_row = _one_row(sql)
        if one_row is not None and len(rows_of) > 1:
            cur = None
            per = max(1, _MAX_PARAMS // len(rows_of[0]))
            for at in range(0, len(rows_of), per):
                rows = rows_of[at:at + per]
                many = one_row[0] + ", ".join([one_row[1]] * len(rows))
                cur = self.execute(many, [v for args in rows for v in args])
            return cur
        cur = None
        for args in rows_of:
            cur = self.execute(sql, args)
        return cur
