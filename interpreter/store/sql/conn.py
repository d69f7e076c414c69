"""The connection the shared statement code writes through, as a type: the part of the DB-API both backends give.

:class:`sqlite3.Connection` is one as it is; the PostgreSQL store's :class:`~sealflow.store.postgres.dialect.PgConn`
renders psycopg's parameter markers and is one too. Typing only: nothing here runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

#: a row as the drivers give it (no row factory is set): a tuple of the selected columns, in order
Row = tuple[Any, ...]


class Cursor(Protocol):
    """A statement's result: its rows (``fetchone`` gives a :data:`Row` or None, typed ``Any`` so that a statement
    sure to give one, ``COUNT(*)``, is indexed as it is) and the rows an update touched."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection in a transaction: ``execute`` and ``executemany`` with ``?`` parameters."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]], /) -> object: ...
