"""The audit chain's links, computed in the database: a writer never reads a head before it appends.

Events are chained in format 2 (:mod:`sealflow.store.auditverify`): the content's hash is
computed by the process that makes the event (:meth:`SqliteChain.bodies`), and the link to the tenant's
chain, ``sha256(prev_hash "\\n" seq "\\n" body)``, needs only the head as it stands in the appending
transaction. On PostgreSQL :data:`FUNCTION` (``sealflow_chain_link``, migration 19) does that in the
database: it reads each tenant's head, links the events in their order, inserts them and moves the heads, in
the caller's transaction. So appending costs one statement sent with the transaction's others, instead of a
round trip to read the heads first while the writers' lock is held.

Every writer holds the writers' lock (:mod:`.batching`) when it calls it, so no two link a chain at once.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sealflow.store.auditchain import SqliteChain
    from sealflow.store.postgres.dialect import PendingEvent, PgConn

#: PostgreSQL migration 19: the audit table's format column and the function (its argument: the events as
#: :meth:`SqliteChain.bodies` gives them, a JSON array of arrays)
FUNCTION = r"""
ALTER TABLE audit ADD COLUMN chain_v SMALLINT;
CREATE FUNCTION sealflow_chain_link(p_events JSONB) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
  e JSONB;
  t TEXT;
  i INT;
  tenants TEXT[] := '{}';
  seqs BIGINT[] := '{}';
  hashes TEXT[] := '{}';
  s BIGINT;
  h TEXT;
  prev TEXT;
  at_seq BIGINT[] := '{}';
  at_prev TEXT[] := '{}';
  at_hash TEXT[] := '{}';
BEGIN
  -- each event's place in its tenant's chain, in their order
  FOR e IN SELECT v FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(v, n) ORDER BY n LOOP
    t := e->>8;
    i := array_position(tenants, t);
    IF i IS NULL THEN
      SELECT seq, hash INTO s, h FROM audit_heads WHERE tenant = t;
      IF NOT FOUND THEN
        s := 0;
        h := '';
      END IF;
      tenants := tenants || t;
      seqs := seqs || s;
      hashes := hashes || h;
      i := array_length(tenants, 1);
    END IF;
    prev := hashes[i];
    s := seqs[i] + 1;
    h := encode(sha256(convert_to(prev || E'\n' || s::TEXT || E'\n' || (e->>16), 'UTF8')), 'hex');
    at_seq := at_seq || s;
    at_prev := at_prev || prev;
    at_hash := at_hash || h;
    seqs[i] := s;
    hashes[i] := h;
  END LOOP;
  -- one insert, in that order (the rows' ids follow it)
  INSERT INTO audit (run_id, step_id, event, actor, state_before, state_after, detail, ts, tenant, workflow,
      workflow_version, plan_digest, decision, tool, summary, error, seq, prev_hash, hash, chain_v)
    SELECT x.v->>0, x.v->>1, x.v->>2, x.v->>3, x.v->>4, x.v->>5, x.v->>6, (x.v->>7)::DOUBLE PRECISION, x.v->>8,
        x.v->>9, (x.v->>10)::BIGINT, x.v->>11, x.v->>12, x.v->>13, x.v->>14, x.v->>15, c.seq, c.prev, c.hash, 2
      FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(v, n)
      JOIN unnest(at_seq, at_prev, at_hash) WITH ORDINALITY AS c(seq, prev, hash, n) USING (n)
      ORDER BY n;
  FOR i IN 1 .. COALESCE(array_length(tenants, 1), 0) LOOP
    INSERT INTO audit_heads (tenant, seq, hash) VALUES (tenants[i], seqs[i], hashes[i])
      ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq, hash = excluded.hash;
  END LOOP;
END $$;
"""

CALL = "SELECT sealflow_chain_link(%s::jsonb)"

#: the events as one JSON text (one parameter, whatever the events; see dialect.BULK); a float's shortest repr
#: is read back by float8's correctly rounded input, so ``ts`` is the number that was hashed
dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class PgChain:
    """Appends a transaction's audit events on PostgreSQL: their content hashed here, linked by the database."""

    def __init__(self, chain: SqliteChain) -> None:
        #: the :class:`~sealflow.store.auditchain.SqliteChain` that hashes the content (its run and
        #: plan caches)
        self.chain = chain

    def append(self, c: PgConn, pending: list[PendingEvent]) -> None:
        c.native(CALL, (dumps(self.chain.bodies(c, pending)),))
