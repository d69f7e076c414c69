"""The audit chain: append-only, hash-chained per tenant, verifiable.

Every audit event belongs to one tenant's chain (the tenant of its run; an
event without a run names its tenant, else it joins the system chain ``""``)
and holds, besides what happened:

``tenant, seq`` (1, 2, 3... per tenant), ``workflow, workflow_version,
plan_digest, run_id, step_id, event`` (the action taken), ``actor,
state_before, state_after, ts, decision`` (the authorisation decision:
``allow`` / ``deny`` / None), ``tool`` (the action or model a step calls),
``summary`` (size and hash of a step's output: never the output), ``error``
(class and message), ``detail`` (JSON; secret values redacted) and
``prev_hash``, the ``hash`` of the tenant's previous event. Its own ``hash`` (format 2, ``chain_v``; events
appended before SQLite migration 20 / PostgreSQL 19 are format 1: :mod:`~.auditverify`) is::

    body = sha256(canonical JSON [tenant, ts, workflow, workflow_version, plan_digest, run_id, step_id,
                                  event, actor, state_before, state_after, decision, tool, summary,
                                  error, detail])
    hash = sha256(prev_hash "\\n" seq "\\n" body)

The content's hash is computed where the event is made (:meth:`SqliteChain.bodies`); its link, inside the
transaction that appends the event, to the tenant's head (``audit_heads``: last seq and hash) as it stands
in that same transaction, and the head moves in the same commit. On SQLite the link is computed here
(:meth:`SqliteChain.link`: a process remembers the heads it wrote and moves a head with a compare-and-set
on that value instead of reading it first; if another process appended meanwhile, the set fails and the
batch is linked again on the stored heads); on PostgreSQL the database computes it in the commit
(``store/postgres/chainlink.py``), so a writer never waits for a head to be read.
Inputs and outputs never enter the audit log: a step's output appears as its
byte size and a truncated sha256.

:func:`verify` (:mod:`sealflow.store.auditverify`) walks each
tenant's chain in append order and names the first event that does not hold:
an *edited* event (its hash no longer matches its content), a *deleted* one (a
gap in ``seq``, or a ``prev_hash`` that is not the previous event's hash; a
deleted tail shows against the head), an *inserted* one and a *reordered* pair
(``seq`` out of order, links broken). Someone able to rewrite the whole file
can cut a tail and move its head back, wipe a tenant, or recompute a
consistent chain: an anchor kept outside the store
(:mod:`sealflow.store.auditanchor`, ``sealflow audit head
--json``) shows those. The heads only move forward: triggers refuse deleting a
head, moving it back or rewriting it at its seq (SQLite migration 7,
PostgreSQL 5).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from sealflow.core.ids import compensation_id
from sealflow.core.redaction import REDACTOR
from sealflow.store.auditverify import (  # re-exported (__all__): verifying is part of the chain's API
    CHAIN_V,
    GENESIS,
    UNCHAINED,
    VERIFY_COLS,
    Break,
    ChainReport,
    body_hash,
    event_hash,
    link_hash,
    row_hash,
    verify,
    verify_tenant,
)
from sealflow.store.auditverify import canonical as _canonical
from sealflow.store.auditverify import canonical_json as _dumps

if TYPE_CHECKING:
    import sqlite3

#: columns the chain adds to the audit table, in hash order after the original ones
CHAIN_COLUMNS = (("tenant", "TEXT"), ("workflow", "TEXT"), ("workflow_version", "INTEGER"), ("plan_digest", "TEXT"),
                 ("decision", "TEXT"), ("tool", "TEXT"), ("summary", "TEXT"), ("error", "TEXT"),
                 ("seq", "INTEGER"), ("prev_hash", "TEXT"), ("hash", "TEXT"))
INSERT = ("INSERT INTO audit (run_id, step_id, event, actor, state_before, state_after, detail, ts, tenant, workflow, "
          "workflow_version, plan_digest, decision, tool, summary, error, seq, prev_hash, hash, chain_v) "
          "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
_HEAD_UPSERT = ("INSERT INTO audit_heads (tenant, seq, hash) VALUES (?,?,?) ON CONFLICT (tenant) DO UPDATE SET "
                "seq = excluded.seq, hash = excluded.hash")
#: move a head only if it is still what this process last wrote (compare-and-set)
_HEAD_CAS = "UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ? AND seq = ? AND hash = ?"
_ERROR_MAX = 500
_DENY_WORDS = ("_denied", "_refused", "refused", "illegal_transition")
_sha256 = hashlib.sha256


class Fetched(Protocol):
    """A statement's result as the chain reads it (a sqlite3 or psycopg cursor)."""

    def fetchone(self) -> Any: ...


class Reads(Protocol):
    """A connection as the chain reads through it (``?`` parameters): sqlite3's, the PostgreSQL store's
    :class:`~sealflow.store.postgres.dialect.PgConn`, its pooled reads outside a transaction."""

    def execute(self, sql: str, args: tuple[Any, ...] = ..., /) -> Fetched: ...


class Written(Fetched, Protocol):
    @property
    def rowcount(self) -> int: ...


class Writes(Protocol):
    """A connection in the transaction that appends events (:meth:`SqliteChain.append`)."""

    def execute(self, sql: str, args: tuple[Any, ...] = ..., /) -> Written: ...

    def executemany(self, sql: str, seq: list[tuple[Any, ...]], /) -> object: ...


def output_summary(output_json: str | None) -> str | None:
    """What the audit keeps of a step's output: its size and a truncated sha256."""
    if output_json is None:
        return None
    data = output_json.encode()
    return f"{len(data)}B sha256:{hashlib.sha256(data).hexdigest()[:16]}"


#: events that are an authorisation decision in themselves (others: ``*_denied`` / ``*_refused`` deny)
_EVENT_DECISION: dict[str, str | None] = {"run.created": "allow", "approval_granted": "allow",
                                          "approval_rejected": "deny"}


def _decision(event: str, detail: dict[str, Any] | None) -> str | None:
    decided = detail.get("decision") if detail else None
    if isinstance(decided, str):
        return decided
    got = _EVENT_DECISION.get(event, "?")
    if got == "?":
        got = _EVENT_DECISION[event] = "deny" if any(w in event for w in _DENY_WORDS) else None
    return got


def _error(detail: dict[str, Any] | None) -> str | None:
    if not detail or not detail.get("error_class"):
        return None
    text = f"{detail['error_class']}: {detail.get('message') or ''}".rstrip(": ")
    return text[:_ERROR_MAX]


def tools_of_plan(body: str) -> dict[str, str]:
    """Step id (and ``<id>@compensate``) -> what it calls, from a plan's JSON."""
    tools: dict[str, str] = {}
    try:
        plan = json.loads(body)
    except (TypeError, ValueError):
        return tools
    for step in plan.get("steps", ()):
        sid = step.get("id")
        if step.get("action"):
            tools[sid] = step["action"]
        elif step.get("ai"):
            tools[sid] = "model:" + str(step["ai"].get("model"))
        elif step.get("agent"):
            tools[sid] = "agent:" + str(step["agent"].get("model"))
        comp = step.get("compensate")
        if comp:
            tools[compensation_id(sid)] = comp.get("action")
    return tools


class SqliteChain:
    """Appends a transaction's audit events to their tenants' chains (SQLite)."""

    def __init__(self, max_cached: int = 8192, *, cache_heads: bool = True) -> None:
        self._runs: dict[str, tuple[Any, ...]] = {}
        self._tools: dict[str, dict[str, str]] = {}
        #: tenant -> (seq, hash) this process last wrote; used only through a compare-and-set
        self._heads: dict[str, tuple[int, str]] = {}
        #: False where several processes take turns writing (PostgreSQL): the head this process wrote last is
        #: then nearly always stale, and reading the head is one statement where a failed compare-and-set is three
        self._cache_heads = cache_heads
        self._max = max_cached
        self._lock = threading.Lock()

    def _run_meta(self, c: Reads, run_id: str | None) -> tuple[Any, ...]:
        if run_id is None:
            return (None, None, None, None)
        meta = self._runs.get(run_id)
        if meta is None:
            row = c.execute("SELECT tenant, workflow, workflow_version, plan_digest FROM runs WHERE id = ?",
                            (run_id,)).fetchone()
            if row is None:
                return (None, None, None, None)  # not cached: the run may be created later
            if len(self._runs) >= self._max:
                self._runs.clear()
            meta = self._runs[run_id] = tuple(row)
        return meta

    def _tool(self, c: Reads, digest: str | None, step_id: str | None) -> str | None:
        if digest is None or step_id is None:
            return None
        tools = self._tools.get(digest)
        if tools is None:
            row = c.execute("SELECT body FROM plans WHERE digest = ?", (digest,)).fetchone()
            tools = tools_of_plan(row[0]) if row else {}
            if len(self._tools) >= 512:
                self._tools.clear()
            self._tools[digest] = tools
        return tools.get(step_id)

    def bodies(self, c: Reads, pending: Iterable[tuple[Any, ...]]) -> list[list[Any]]:
        """The chain's view of ``pending`` events ``(run_id, step_id, event, actor, before, after, detail_json,
        ts[, extra])``: each as ``[run_id, step_id, event, actor, before, after, detail, ts, tenant, workflow,
        version, digest, decision, tool, summary, error, body]`` (``body``: its content's hash, format 2), all
        but its place in its tenant's chain, which :meth:`link` (or the database) gives it."""
        out: list[list[Any]] = []
        redact = REDACTOR.active
        runs, all_tools, decisions = self._runs, self._tools, _EVENT_DECISION
        canonical, sha256 = _canonical, _sha256
        for item in pending:
            run_id, step_id, event, actor, before, after, detail, ts = item[:8]
            ts = float(ts)  # a REAL column gives a float back: hash what verify will read
            extra = item[8] if len(item) > 8 else None
            meta = runs.get(run_id) if run_id is not None else None
            tools = all_tools.get(meta[3]) if meta is not None else None
            decision = decisions.get(event, "?")
            if (tools is not None and decision != "?" and not redact
                    and (detail is None or ('"error_class"' not in detail and '"decision"' not in detail))
                    and (extra is None or len(extra) == 1 and "summary" in extra)):
                # the common case (a step or run event of a known run, its detail if any naming no error or
                # decision, as a step scheduled and claimed in one commit): nothing to parse or look up
                assert meta is not None  # (tools were found by it)
                tenant, workflow, version, digest = meta
                tool = tools.get(step_id) if step_id is not None else None
                summary = extra["summary"] if extra is not None else None
                error = None
            else:
                tenant, workflow, version, digest = self._run_meta(c, run_id)
                extra = extra or {}
                pmap = None
                if detail is not None and ((redact and REDACTOR.contains(detail)) or tenant is None
                                           or '"error_class"' in detail or '"decision"' in detail):
                    parsed = json.loads(detail)
                    if redact and REDACTOR.contains(detail):  # leaf by leaf, then escaped forms in the text
                        parsed = REDACTOR.value(parsed)
                        detail = REDACTOR.text(_dumps(parsed))
                    pmap = parsed if type(parsed) is dict else None
                if extra.get("tenant"):
                    tenant = extra["tenant"]
                if tenant is None:
                    tenant = str(pmap.get("tenant") or "") if pmap is not None else ""
                decision = extra.get("decision") or _decision(event, pmap)
                tool = extra.get("tool") or self._tool(c, digest, step_id)
                summary = extra.get("summary")
                error = extra.get("error") or (_error(pmap) if pmap is not None else None)
                if redact and error:
                    error = REDACTOR.text(error)
            body = sha256(canonical([tenant, ts, workflow, version, digest, run_id, step_id, event, actor, before,
                                     after, decision, tool, summary, error, detail]).encode()).hexdigest()
            out.append([run_id, step_id, event, actor, before, after, detail, ts, tenant, workflow, version, digest,
                        decision, tool, summary, error, body])  # (= auditverify.body_hash, inlined)
        return out

    def link(self, c: Reads, bodies: list[list[Any]], known: dict[str, tuple[int, str]] | None = None
             ) -> tuple[list[tuple[Any, ...]], dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
        """The rows to insert for :meth:`bodies`, each placed in its tenant's chain (format 2), the tenants' new
        heads, and the heads they were chained to (taken from ``known`` when there, else read)."""
        heads: dict[str, tuple[int, str]] = {}
        based: dict[str, tuple[int, str]] = {}
        out: list[tuple[Any, ...]] = []
        sha256 = _sha256
        for b in bodies:
            tenant = b[8]
            head = heads.get(tenant)
            if head is None:
                head = known.get(tenant) if known else None
                if head is None:
                    got = c.execute("SELECT seq, hash FROM audit_heads WHERE tenant = ?", (tenant,)).fetchone()
                    head = (got[0], got[1]) if got else (0, GENESIS)
                based[tenant] = head
            seq = head[0] + 1
            prev = head[1]
            digest = sha256(f"{prev}\n{seq}\n{b[16]}".encode()).hexdigest()  # = auditverify.link_hash, inlined
            heads[tenant] = (seq, digest)
            out.append((*b[:16], seq, prev, digest, CHAIN_V))
        return out, heads, based

    def rows(self, c: Reads, pending: Iterable[tuple[Any, ...]], known: dict[str, tuple[int, str]] | None = None
             ) -> tuple[list[tuple[Any, ...]], dict[str, tuple[int, str]], dict[str, tuple[int, str]]]:
        """:meth:`link` of :meth:`bodies`: the chained rows, the new heads, the heads they were chained to."""
        return self.link(c, self.bodies(c, pending), known)

    def append(self, c: Writes, pending: list[tuple[Any, ...]]) -> None:
        """Write ``pending`` events chained, and move the heads (inside the caller's transaction).

        A tenant's head this process wrote last is not read again: the head row is moved with a
        compare-and-set on it, and if another process moved it meanwhile, every head is read and
        the events chained again."""
        known = self._heads if self._cache_heads else {}
        bodies = self.bodies(c, pending)
        rows, heads, based = self.link(c, bodies, known)
        moved: list[str] = []
        stale = False
        for tenant, (seq, digest) in heads.items():
            start = based[tenant]
            if known.get(tenant) == start:  # chained to the cached head: move it only if still there
                if c.execute(_HEAD_CAS, (seq, digest, tenant, start[0], start[1])).rowcount != 1:
                    stale = True
                    break
            else:  # chained to the head just read under this transaction's write lock
                c.execute(_HEAD_UPSERT, (tenant, seq, digest))
            moved.append(tenant)
        if stale:  # another process appended meanwhile: chain again on the stored heads
            # (a head already moved here stays: it was moved from the stored head, and chaining again from
            # that same head gives the same rows; heads never move backwards, see the triggers)
            known.clear()
            rows, heads, based = self.link(c, bodies, {t: based[t] for t in moved})
            for tenant, (seq, digest) in heads.items():
                c.execute(_HEAD_UPSERT, (tenant, seq, digest))
        c.executemany(INSERT, rows)
        if not self._cache_heads:
            return
        if len(known) > self._max:
            known.clear()
        known.update(heads)

    def remember_run(self, run_id: str, tenant: str, workflow: str, version: int, digest: str) -> None:
        """Cache a run's chain fields the caller holds (its record), so chaining its events reads nothing."""
        if run_id not in self._runs:
            if len(self._runs) >= self._max:
                self._runs.clear()
            self._runs[run_id] = (tenant, workflow, version, digest)

    def knows_tools(self, digest: str) -> bool:
        return digest in self._tools

    def remember_plan(self, digest: str, body: str) -> None:
        """Cache what a plan's steps call from its JSON (a plan not stored yet: its run's first events)."""
        if len(self._tools) >= 512:
            self._tools.clear()
        self._tools[digest] = tools_of_plan(body)


# -- the migration ---------------------------------------------------------------------------------

_TRIGGER = ("CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'the audit log is "
            "append-only: append a new event instead'); END")


def migrate(conn: sqlite3.Connection) -> None:
    """Schema changes of the chain: new audit columns, heads, tenant usage; backfill existing events."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(audit)")}
    for name, kind in CHAIN_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE audit ADD COLUMN {name} {kind}")
    conn.execute("CREATE TABLE IF NOT EXISTS audit_heads (tenant TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
                 "hash TEXT NOT NULL) WITHOUT ROWID")
    conn.execute("CREATE TABLE IF NOT EXISTS tenant_usage (tenant TEXT NOT NULL, day INTEGER NOT NULL, "
                 "tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL NOT NULL DEFAULT 0, "
                 "PRIMARY KEY (tenant, day)) WITHOUT ROWID")
    rows = conn.execute("SELECT id, run_id, step_id, event, actor, state_before, state_after, detail, ts FROM audit "
                        "WHERE hash IS NULL ORDER BY id").fetchall()
    if not rows:
        return
    # chained in format 1, the format of the time (the column naming a format comes with migration 20)
    heads: dict[str, tuple[int, str]] = {}
    updates = []
    for b, row in zip(SqliteChain().bodies(conn, [r[1:] for r in rows]), rows, strict=True):
        tenant = b[8]
        seq, prev = heads.get(tenant, (0, GENESIS))
        digest = event_hash(tenant, seq + 1, prev, b[7], b[9], b[10], b[11], b[0], b[1], b[2], b[3], b[4], b[5], b[12],
                            b[13], b[14], b[15], b[6])
        heads[tenant] = (seq + 1, digest)
        updates.append((b[6], *b[8:16], seq + 1, prev, digest, row[0]))
    conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
    conn.executemany("UPDATE audit SET detail = ?, tenant = ?, workflow = ?, workflow_version = ?, plan_digest = ?, "
                     "decision = ?, tool = ?, summary = ?, error = ?, seq = ?, prev_hash = ?, hash = ? WHERE id = ?",
                     updates)
    conn.execute(_TRIGGER)
    conn.executemany(_HEAD_UPSERT, [(t, s, h) for t, (s, h) in heads.items()])


#: the module's own names and those it re-exports
__all__ = [
    "CHAIN_COLUMNS", "INSERT", "Fetched", "Reads", "Written", "Writes", "output_summary", "tools_of_plan",
    "SqliteChain", "migrate", "CHAIN_V", "GENESIS", "UNCHAINED", "VERIFY_COLS", "Break", "ChainReport", "body_hash",
    "event_hash", "link_hash", "row_hash", "verify", "verify_tenant",
]
