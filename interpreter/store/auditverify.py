"""The audit chain's hash of an event, and verifying chains against it.

What an event's ``hash`` is taken of (see :mod:`sealflow.store.auditchain`, which appends events
chained) and :func:`verify`, which walks each tenant's chain in append order and names the first event that
does not hold (edited, deleted, inserted, reordered, a tail cut against the head, an event added outside
sealflow). Two formats, named by each event's ``chain_v``:

* **2** (every event appended since store migration SQLite 20 / PostgreSQL 19): ``hash = sha256(prev_hash
  "\\n" seq "\\n" body)`` where ``body`` is the hex sha256 of the canonical JSON of the event's content
  (:func:`body_hash`). The content is hashed where the event is made; the link to the chain, which needs the
  tenant's head, is a hash of three short texts, which the PostgreSQL store computes in the database
  inside the commit (no round trip to read the head first, see ``store/postgres/chainlink.py``);
* **1** (``chain_v`` NULL: events appended before): ``hash = sha256(canonical JSON of [tenant, seq,
  prev_hash, ts, ...content])`` (:func:`event_hash`).

Both commit to the same fields; a chain may hold both (the older first), and verification checks each event
by its own format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sealflow.store.audit import AuditLog

GENESIS = ""
#: how a report names events that carry no tenant (appended outside sealflow)
UNCHAINED = "(no tenant)"
#: what verify reads, in this order
VERIFY_COLS = ("id, tenant, seq, prev_hash, hash, ts, workflow, workflow_version, plan_digest, run_id, step_id, "
               "event, actor, state_before, state_after, decision, tool, summary, error, detail, chain_v")
#: the format of the events appended now (module docstring)
CHAIN_V = 2

#: canonical JSON: compact, UTF-8, no NaN; built once (json.dumps with options builds an encoder per call)
canonical_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _refuse(value: Any) -> Any:
    raise TypeError(f"an audit field of type {type(value).__name__} is not JSON")


_c_list: Callable[[list[Any], int], Iterable[str]] | None
try:  # the C encoder itself, made once: what canonical_json runs, without its per-call set-up
    from json.encoder import (  # type: ignore[attr-defined]  # the json accelerator's, not in typeshed
        c_encode_basestring,
        c_make_encoder,
    )

    _c_list = c_make_encoder(None, _refuse, c_encode_basestring, None, ":", ",", False, False, False)
except (ImportError, TypeError):  # pragma: no cover - a Python without the json accelerator
    _c_list = None


def canonical(fields: list[Any]) -> str:
    """``fields`` as canonical JSON (what an event's hash is taken of)."""
    return "".join(_c_list(fields, 0)) if _c_list is not None else canonical_json(fields)


def event_hash(tenant: str | None, seq: int, prev_hash: str, ts: float, workflow: str | None, version: int | None,
               digest: str | None, run_id: str | None, step_id: str | None, event: str, actor: str,
               before: str | None, after: str | None, decision: str | None, tool: str | None, summary: str | None,
               error: str | None, detail: str | None) -> str:
    """The hash of one event of format 1 (its fields: :mod:`sealflow.store.auditchain`)."""
    body = canonical([tenant, seq, prev_hash, ts, workflow, version, digest, run_id, step_id, event, actor, before,
                      after, decision, tool, summary, error, detail])
    return hashlib.sha256(body.encode()).hexdigest()


def body_hash(tenant: str | None, ts: float, workflow: str | None, version: int | None, digest: str | None,
              run_id: str | None, step_id: str | None, event: str, actor: str, before: str | None, after: str | None,
              decision: str | None, tool: str | None, summary: str | None, error: str | None,
              detail: str | None) -> str:
    """The hash of one event's content (format 2): everything but its place in the chain."""
    body = canonical([tenant, ts, workflow, version, digest, run_id, step_id, event, actor, before, after, decision,
                      tool, summary, error, detail])
    return hashlib.sha256(body.encode()).hexdigest()


def link_hash(prev_hash: str, seq: int, body: str) -> str:
    """The hash of an event of format 2: its content's hash ``body`` at ``seq``, after ``prev_hash``. The
    PostgreSQL store computes the same in SQL (``store/postgres/chainlink.py``; a test holds the two equal)."""
    return hashlib.sha256(f"{prev_hash}\n{seq}\n{body}".encode()).hexdigest()


def row_hash(row: tuple[Any, ...]) -> str:
    """The hash a :data:`VERIFY_COLS` row should carry, by its format."""
    (_id, tenant, seq, prev_hash, _stored, ts, workflow, version, digest, run_id, step_id, event, actor, before, after,
     decision, tool, summary, error, detail, chain_v) = row
    if chain_v == 2:
        return link_hash(prev_hash, seq, body_hash(tenant, ts, workflow, version, digest, run_id, step_id, event,
                                                   actor, before, after, decision, tool, summary, error, detail))
    return event_hash(tenant, seq, prev_hash, ts, workflow, version, digest, run_id, step_id, event, actor, before,
                      after, decision, tool, summary, error, detail)


# -- verification ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Break:
    """The first event of a tenant's chain that does not hold."""

    #: None: the events that name no tenant (:data:`UNCHAINED`)
    tenant: str | None
    event_id: int | None
    seq: int | None
    #: edited | deleted | inserted | reordered | truncated | unchained; against an anchor: cut | wiped | rewritten
    problem: str
    message: str


@dataclasses.dataclass
class ChainReport:
    """What :func:`verify` found, per tenant."""

    events: dict[str, int] = dataclasses.field(default_factory=dict)
    heads: dict[str, str] = dataclasses.field(default_factory=dict)
    breaks: list[Break] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def first(self) -> Break | None:
        return min(self.breaks, key=lambda b: (b.event_id is None, b.event_id or 0)) if self.breaks else None


def _where(row: tuple[Any, ...]) -> str:
    event_id, seq, event, run_id = row[0], row[2], row[11], row[9]
    return f"event {event_id} (seq {seq}, {event!r}" + (f", run {run_id})" if run_id else ")")


def verify_tenant(tenant: str | None, rows: Iterable[tuple[Any, ...]], head: tuple[int, str] | None
                  ) -> tuple[int, str, Break | None]:
    """Walk one tenant's rows (``VERIFY_COLS``, in id order); return (events, last hash, first break)."""
    rows = list(rows)
    seqs = {r[2] for r in rows}
    prev, expected = GENESIS, 1
    for i, row in enumerate(rows):
        event_id, seq, prev_hash, stored, chain_v = row[0], row[2], row[3], row[4], row[20]
        where = _where(row)
        if seq is None or stored is None:
            return i + 1, prev, Break(tenant, event_id, seq, "unchained",
                                      f"{where} carries no chain hash: it was added outside sealflow")
        if chain_v not in (None, 2):
            return i + 1, prev, Break(tenant, event_id, seq, "edited",
                                      f"{where} names chain format {chain_v!r}, which no sealflow writes")
        if row_hash((event_id, tenant, *row[2:])) != stored:
            return i + 1, prev, Break(tenant, event_id, seq, "edited",
                                      f"{where} was edited: its content no longer matches its hash")
        if seq > expected:
            gap = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
            if expected in seqs:
                return i + 1, prev, Break(tenant, event_id, seq, "reordered",
                                          f"{where} comes before {gap}: events were reordered")
            return i + 1, prev, Break(tenant, event_id, seq, "deleted", f"{where}: {gap} before it is missing "
                                                                        "(deleted)")
        if seq < expected:
            # two events claim one place: the genuine one is the one the chain goes on from
            nxt = rows[i + 1][3] if i + 1 < len(rows) else (head[1] if head else None)
            fake = rows[i - 1] if i and nxt == stored else row
            return i + 1, prev, Break(tenant, fake[0], fake[2], "inserted",
                                      f"{_where(fake)} was inserted: another event holds its place in the chain")
        if prev_hash != prev:
            return i + 1, prev, Break(tenant, event_id, seq, "inserted",
                                      f"{where} does not link to the event before it: an event was inserted or "
                                      "replaced before it")
        prev, expected = stored, expected + 1
    count = len(rows)
    if head is not None and (head[0] != expected - 1 or head[1] != prev):
        return count, prev, Break(tenant, None, head[0], "truncated",
                                  f"the chain ends at seq {expected - 1} but its head is seq {head[0]}: the last "
                                  f"{max(head[0] - expected + 1, 1)} event(s) were deleted")
    if head is None and count:
        return count, prev, Break(tenant, None, None, "truncated", "the chain has events but no head record")
    return count, prev, None


def verify(store: AuditLog, tenant: str | None = None) -> ChainReport:
    """Verify the chain of ``tenant`` (None: every tenant) in ``store``."""
    report = ChainReport()
    heads = store.audit_heads()
    tenants: list[str | None] = [tenant] if tenant is not None else \
        sorted(set(heads) | set(store.audit_tenants()), key=lambda t: (t is None, t or ""))
    for name in tenants:
        head, rows = store.audit_snapshot(name)  # read together: a live store appends meanwhile
        count, last, broken = verify_tenant(name, rows, head)
        label = UNCHAINED if name is None else name
        report.events[label] = count
        report.heads[label] = last
        if broken is not None:
            report.breaks.append(broken)
    return report
