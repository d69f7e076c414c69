"""SQLite SQL -> PostgreSQL SQL, and a connection that speaks the sqlite3 interface the shared store code uses.

The store's statements (claim, commit, cancel, redrive, the sweep's steps, the audit chain, admission,
the definition registry) are written once, in :mod:`sealflow.store.sqlite.store` and its mixins,
in a portable subset of SQL with ``?`` parameters. The Postgres store runs the *same* code through
:class:`PgConn`, which rewrites the few SQLite-only forms (cached per statement string):

* ``?`` -> ``%s`` (a literal ``%`` is doubled first);
* ``INSERT OR IGNORE`` -> ``INSERT ... ON CONFLICT DO NOTHING``;
* ``INSERT OR REPLACE INTO outbox`` -> an upsert on the outbox key (columns not listed become NULL, as a
  SQLite REPLACE does);
* ``x IS ?`` -> ``x IS NOT DISTINCT FROM %s``;
* a statement ending in a derived table (``FROM (SELECT ...)``) gets it an alias;
* in an upsert, ``col = col + excluded.col`` -> ``col = table.col + excluded.col`` (unqualified is ambiguous).

Anything else SQLite-specific (``?1`` numbered parameters, PRAGMAs) is not translated: the Postgres store
overrides the methods that use it.
"""

from __future__ import annotations

import functools
import json
import re

_OUTBOX_UPSERT = (" ON CONFLICT (run_id, step_id, attempt, token) DO UPDATE SET due_at = excluded.due_at, "
                  "sent_at = excluded.sent_at")


_json_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """The PostgreSQL form of one statement of the shared store code."""
    s = sql.replace("%", "%%")
    if s.startswith("INSERT OR IGNORE "):
        s = "INSERT " + s[len("INSERT OR IGNORE "):] + " ON CONFLICT DO NOTHING"
    elif s.startswith("INSERT OR REPLACE INTO outbox "):
        s = "INSERT " + s[len("INSERT OR REPLACE "):] + _OUTBOX_UPSERT
    elif s.startswith("INSERT OR "):
        raise NotImplementedError(f"no PostgreSQL form for {sql[:60]!r}; add one to store/postgres/dialect.py")
    if " DO UPDATE SET " in s:  # `col = col + excluded.col`: PostgreSQL wants the table's column named
        table = re.match(r"INSERT INTO (\w+)", s)
        if table:
            s = re.sub(r"= (\w+) \+ excluded\.", lambda m: f"= {table.group(1)}.{m.group(1)} + excluded.", s)
    if "FROM (SELECT " in s and s.endswith(")"):  # a derived table needs an alias before PostgreSQL 16
        s += " AS derived"
    s = s.replace(" IS ?", " IS NOT DISTINCT FROM ?")
    return s.replace("?", "%s")


class PgConn:
    """A psycopg connection seen through the part of the sqlite3 interface the shared code uses:
    ``execute`` (returning a cursor with ``fetchone``/``fetchall``/``rowcount``, iterable) and ``executemany``."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    def execute(self, sql: str, args=()):
        cur = self.raw.cursor()
        cur.execute(translate(sql), tuple(args))
        return cur

    def executemany(self, sql: str, seq):
        cur = self.raw.cursor()
        cur.executemany(translate(sql), [tuple(a) for a in seq])
        return cur

    def native(self, sql: str, args=()):
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

#: an ``INSERT INTO t (cols) VALUES (?, ...)`` of one row (group 1: the row)
_MAX_PARAMS = 65_535
_VALUES = re.compile(r"^INSERT INTO \w+ \([^)]*\) VALUES (\(\?(?:, ?\?)*\))$")


@functools.lru_cache(maxsize=64)
def _one_row(sql: str) -> re.Match | None:
    return _VALUES.search(sql)


class _PipedCursor:
    """A cursor of a statement sent in pipeline mode. Its rows or row count are waited for when asked, with a
    sync: everything sent before it is then done too (its errors raised here), in one round trip."""

    __slots__ = ("_cur", "_conn")

    def __init__(self, cur, conn: PipedConn):
        self._cur, self._conn = cur, conn

    def _ready(self):
        if self._cur.pgresult is None:
            self._conn.sync()
        return self._cur

    @property
    def rowcount(self) -> int:
        return self._ready().rowcount

    def fetchone(self):
        return self._ready().fetchone()

    def fetchall(self):
        return self._ready().fetchall()

    def __iter__(self):
        return iter(self._ready())


class PipedConn(PgConn):
    """:class:`PgConn` on a connection in pipeline mode (:mod:`.batching`): a statement is sent without waiting
    for the server; only a read (or a row count) waits, for everything sent so far. ``sent`` says whether
    anything was sent since the last sync."""

    __slots__ = ("pipe", "sent")

    def __init__(self, raw, pipe):
        self.raw, self.pipe, self.sent = raw, pipe, False

    def sync(self) -> None:
        self.sent = False
        self.pipe.sync()

    def execute(self, sql: str, args=()):
        return self.native(translate(sql), tuple(args))

    def native(self, sql: str, args=()):
        cur = self.raw.cursor()
        cur.execute(sql, args)
        self.sent = True
        return _PipedCursor(cur, self)

    def executemany(self, sql: str, seq):
        """One statement (an ``INSERT ... VALUES (...)`` of all the rows at once), or each queued (psycopg's own
        ``executemany`` would end with a sync: a round trip)."""
        seq = [tuple(a) for a in seq]
        if not seq:
            return None
        bulk = BULK.get(sql)
        if bulk is not None:  # every row in one JSON text (one parameter, whatever the rows)
            return self.native(bulk, (_json_dumps(seq),))
        one_row = _one_row(sql)
        if one_row is not None and len(seq) > 1:
            cur = None
            per = max(1, _MAX_PARAMS // len(seq[0]))  # PostgreSQL takes at most 65,535 parameters a statement
            for at in range(0, len(seq), per):
                rows = seq[at:at + per]
                many = sql[:one_row.start(1)] + ", ".join([one_row.group(1)] * len(rows))
                cur = self.execute(many, [v for args in rows for v in args])
            return cur
        cur = None
        for args in seq:
            cur = self.execute(sql, args)
        return cur
