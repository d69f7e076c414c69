"""The PostgreSQL schema, as numbered migrations (its own numbering, independent of SQLite's).

Each migration runs in one transaction holding a transaction-scoped advisory lock, and checks the
recorded version again under that lock: two processes migrating at once apply each step once, and
running :func:`migrate` again does nothing (idempotent). A database whose version is newer than
:data:`LATEST` is refused with :class:`SchemaTooNew`; one that is older is refused with
:class:`SchemaTooOld` unless the caller asked to migrate (``sealflow store migrate``, or a worker
started with migration on). Append migrations; never edit one that has shipped. Numbers may skip
(branches reserve theirs); they only increase.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sealflow.store.errors import SchemaTooNew, StoreError
from sealflow.store.postgres.chainlink import FUNCTION as CHAIN_LINK
from sealflow.store.postgres.hotsql import FUNCTIONS as HOT_FUNCTIONS
from sealflow.store.sql.breakers import PG_SCHEMA as PG_BREAKERS
from sealflow.store.sql.children import PG_SCHEMA as PG_CHILDREN
from sealflow.store.sql.deliveries import PG_SCHEMA as PG_DELIVERIES
from sealflow.store.sql.events import PG_SCHEMA as PG_EVENTS
from sealflow.store.sql.inbox import PG_SCHEMA as PG_INBOX
from sealflow.store.sql.ratelimits import PG_SCHEMA as PG_RATELIMITS
from sealflow.store.sql.ratelimits import TOTALS_BACKFILL, TOTALS_PG
from sealflow.store.sql.reservations import PG_SCHEMA as PG_RESERVATIONS
from sealflow.store.sql.sessions import PG_SCHEMA as PG_SESSIONS
from sealflow.store.sql.tags import SCHEMA as RUN_TAGS

if TYPE_CHECKING:
    import psycopg

#: pg_advisory_xact_lock key of migrations ("sealflow" in ASCII, folded to 63 bits)
_LOCK = 0x7365616C666C6F77 & 0x7FFFFFFFFFFFFFFF

_V1 = """
CREATE TABLE plans (
  digest TEXT PRIMARY KEY, workflow TEXT NOT NULL, version BIGINT NOT NULL,
  body TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, workflow TEXT NOT NULL, workflow_version BIGINT NOT NULL,
  plan_digest TEXT NOT NULL REFERENCES plans(digest), input TEXT NOT NULL, state TEXT NOT NULL,
  rev BIGINT NOT NULL, initiator TEXT NOT NULL, idempotency_key TEXT, input_hash TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, deadline DOUBLE PRECISION,
  output TEXT, error_class TEXT, error_message TEXT,
  steps_executed BIGINT NOT NULL DEFAULT 0, tokens BIGINT NOT NULL DEFAULT 0,
  cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0, tool_calls BIGINT NOT NULL DEFAULT 0,
  redrives BIGINT NOT NULL DEFAULT 0, cursor_step TEXT, cursor_attempt BIGINT,
  priority TEXT NOT NULL DEFAULT 'normal', acting_as TEXT, access_mode TEXT, signer TEXT
);
CREATE UNIQUE INDEX runs_idempotency ON runs(tenant, workflow, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_state ON runs(state, created_at);
CREATE INDEX runs_tenant_state ON runs(tenant, state);
CREATE TABLE attempts (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt BIGINT NOT NULL, try_no BIGINT NOT NULL,
  state TEXT NOT NULL, token BIGINT NOT NULL, lease_owner TEXT, lease_expires DOUBLE PRECISION,
  lease_ms BIGINT NOT NULL, scheduled_at DOUBLE PRECISION, started_at DOUBLE PRECISION,
  ended_at DOUBLE PRECISION, due_at DOUBLE PRECISION,
  output TEXT, error_class TEXT, error_message TEXT, data TEXT, seq BIGINT NOT NULL,
  PRIMARY KEY (run_id, step_id, attempt)
);
CREATE TABLE results (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, status TEXT NOT NULL, output TEXT,
  PRIMARY KEY (run_id, step_id)
);
CREATE TABLE ledger (
  tenant TEXT NOT NULL, key TEXT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL,
  result TEXT, created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, key)
);
CREATE TABLE outbox (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt BIGINT NOT NULL, token BIGINT NOT NULL,
  due_at DOUBLE PRECISION NOT NULL, sent_at DOUBLE PRECISION,
  PRIMARY KEY (run_id, step_id, attempt, token)
);
CREATE INDEX outbox_unsent ON outbox(due_at) WHERE sent_at IS NULL;
CREATE TABLE timers (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, run_id TEXT NOT NULL, step_id TEXT, attempt BIGINT,
  token BIGINT, kind TEXT NOT NULL CHECK (kind IN ('backoff','wait','approval_timeout','run_deadline')),
  fire_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX timers_fire ON timers(fire_at);
CREATE INDEX timers_run ON timers(run_id);
CREATE TABLE dead_letters (
  run_id TEXT PRIMARY KEY, step_id TEXT, reason TEXT NOT NULL, error_class TEXT NOT NULL,
  fingerprint TEXT NOT NULL, redrive_count BIGINT NOT NULL DEFAULT 0,
  quarantined BIGINT NOT NULL DEFAULT 0, status TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX dead_letters_status ON dead_letters(status);
CREATE TABLE audit (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, run_id TEXT, step_id TEXT, event TEXT NOT NULL,
  actor TEXT NOT NULL, state_before TEXT, state_after TEXT, detail TEXT, ts DOUBLE PRECISION NOT NULL,
  tenant TEXT, workflow TEXT, workflow_version BIGINT, plan_digest TEXT, decision TEXT, tool TEXT,
  summary TEXT, error TEXT, seq BIGINT, prev_hash TEXT, hash TEXT
);
CREATE INDEX audit_run ON audit(run_id, id);
CREATE INDEX audit_tenant ON audit(tenant, id);
CREATE FUNCTION sealflow_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the audit log is append-only: append a new event instead'; END $$;
CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit
  FOR EACH ROW EXECUTE FUNCTION sealflow_audit_append_only();
CREATE TABLE audit_heads (tenant TEXT PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL);
CREATE TABLE tenant_usage (
  tenant TEXT NOT NULL, day BIGINT NOT NULL, tokens BIGINT NOT NULL DEFAULT 0,
  cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (tenant, day)
);
CREATE TABLE definitions (
  name TEXT NOT NULL, version BIGINT NOT NULL, digest TEXT NOT NULL, signer TEXT NOT NULL,
  first_seen DOUBLE PRECISION NOT NULL, last_seen DOUBLE PRECISION NOT NULL, loads BIGINT NOT NULL DEFAULT 1,
  PRIMARY KEY (name, version)
);
CREATE TABLE definition_pins (
  name TEXT PRIMARY KEY, version BIGINT NOT NULL, actor TEXT NOT NULL, at DOUBLE PRECISION NOT NULL
);
"""

# new work wakes idle workers: an outbox row written unsent (new, deferred or to be sent again) notifies
# channel sealflow_work at commit (PostgreSQL folds a transaction's identical notifications into one);
# marking rows sent does not
_V2_NOTIFY = """
CREATE FUNCTION sealflow_notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('sealflow_work', ''); RETURN NULL; END $$;
CREATE TRIGGER outbox_notify AFTER INSERT OR UPDATE OF sent_at, due_at ON outbox
  FOR EACH ROW WHEN (NEW.sent_at IS NULL) EXECUTE FUNCTION sealflow_notify_work();
"""

# liveness without host names and pids: workers heartbeat in the store
_V3_WORKERS = """
CREATE TABLE workers (
  owner TEXT PRIMARY KEY, started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

# a worker's Dramatiq broker id (Redis) with its heartbeat: once the heartbeat lapses, another worker puts the
# messages that worker fetched but never acknowledged back on their queues (service/liveness.py)
PG_RATE_TOTALS = TOTALS_PG + TOTALS_BACKFILL

_V17_BROKER_IDS = """
ALTER TABLE workers ADD COLUMN IF NOT EXISTS broker_id TEXT;
"""

# the submitted bytes and envelopes of definitions; an executor's refusal of a version
# (sealflow.store.definitions)
_V4_SOURCES = """
CREATE TABLE definition_sources (
  digest TEXT NOT NULL, source_key TEXT NOT NULL, name TEXT NOT NULL, version BIGINT NOT NULL,
  source BYTEA NOT NULL, envelope BYTEA, envelope_kind TEXT, refs TEXT, first_seen DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (digest, source_key)
);
ALTER TABLE definitions ADD COLUMN refused TEXT;
"""

# the heads of the audit chains only move forward: a head cannot be deleted (a wiped tenant), moved back
# (a cut tail hidden with it) or rewritten at its seq; TRUNCATE (which row triggers do not see) is refused
# on the heads and on the audit log
_V5_HEADS = """
CREATE FUNCTION sealflow_audit_heads_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'audit heads only move forward: a head cannot be deleted';
  END IF;
  IF NEW.tenant IS DISTINCT FROM OLD.tenant OR NEW.seq < OLD.seq
     OR (NEW.seq = OLD.seq AND NEW.hash IS DISTINCT FROM OLD.hash) THEN
    RAISE EXCEPTION 'audit heads only move forward: a head cannot move back or be rewritten';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER audit_heads_forward BEFORE UPDATE OR DELETE ON audit_heads
  FOR EACH ROW EXECUTE FUNCTION sealflow_audit_heads_forward();
CREATE TRIGGER audit_heads_no_truncate BEFORE TRUNCATE ON audit_heads
  FOR EACH STATEMENT EXECUTE FUNCTION sealflow_audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
  FOR EACH STATEMENT EXECUTE FUNCTION sealflow_audit_append_only();
"""

# poison steps: how many times an attempt's lease expired (a lost lease counts as a failed attempt)
_V8_LEASES_LOST = """
ALTER TABLE attempts ADD COLUMN leases_lost BIGINT NOT NULL DEFAULT 0;
"""

# an action's exception: its traceback, kept with the failed attempt (redacted, bounded: core/tracebacks.py)
_V20_ERROR_TRACE = """
ALTER TABLE attempts ADD COLUMN error_trace TEXT;
"""

# locks and pools (store/sql/slots.py holds the SQL they run)
_V6_SLOTS = """
CREATE TABLE slot_names (
  name TEXT PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0, ticket BIGINT NOT NULL DEFAULT 0,
  lim BIGINT NOT NULL DEFAULT 1
);
CREATE TABLE slot_holders (
  name TEXT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt BIGINT NOT NULL,
  fence BIGINT NOT NULL, since DOUBLE PRECISION NOT NULL, PRIMARY KEY (name, run_id, step_id, attempt)
);
CREATE INDEX slot_holders_run ON slot_holders(run_id, step_id);
CREATE TABLE slot_waiters (
  name TEXT NOT NULL, ticket BIGINT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL,
  attempt BIGINT NOT NULL, arrived DOUBLE PRECISION NOT NULL, since DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (name, ticket)
);
CREATE INDEX slot_waiters_run ON slot_waiters(run_id, step_id, attempt);
"""

_V7_BREAKERS = PG_BREAKERS


# the HTTP API: bearer tokens (only their secrets' hashes) and keyset-paginated run listings
_V9_API = """
CREATE TABLE api_tokens (
  id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, principal TEXT NOT NULL, tenant TEXT NOT NULL,
  created_at DOUBLE PRECISION NOT NULL, created_by TEXT NOT NULL, expires_at DOUBLE PRECISION,
  revoked_at DOUBLE PRECISION, label TEXT
);
CREATE INDEX api_tokens_tenant ON api_tokens(tenant, created_at);
CREATE INDEX runs_tenant_created ON runs(tenant, created_at, id);
"""

#: (version, description, SQL); applied in order (numbers may skip: each branch of work owns its own)
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "runs, plans, attempts, results, ledger, outbox, timers, dead letters, hash-chained audit, "
        "tenant usage, definition registry", _V1),
    (2, "outbox inserts notify idle workers (LISTEN sealflow_work)", _V2_NOTIFY),
    (3, "workers heartbeat in the store", _V3_WORKERS),
    (4, "definition sources (the submitted bytes and signature envelopes); definitions.refused",
     _V4_SOURCES),
    (5, "audit heads only move forward (no delete, no move back); no TRUNCATE of the audit", _V5_HEADS),
    (6, "lease slots for locks and pools: names (fencing tokens), holders, arrival-ordered waiters", _V6_SLOTS),
    (7, "circuit breakers shared by every process", _V7_BREAKERS),
    (8, "attempts.leases_lost (a lost lease counts as a failed attempt)", _V8_LEASES_LOST),
    (9, "API tokens (hashed secrets, expiry, revocation); runs by tenant and creation time", _V9_API),
    (11, "signed events: the first answer per event id, the last sequence applied per ordering key", PG_EVENTS),
    (12, "usage reservations: a model call's worst case held against the tenant's daily quota", PG_RESERVATIONS),
    (13, "per-model rate limits shared by every process: the calls granted in the last window", PG_RATELIMITS),
    (14, "approval notifications: one delivery row per channel, written with the gate that opens", PG_DELIVERIES),
    (15, "fan-out: child runs (parent run, step, attempt, item index, item) and their counters", PG_CHILDREN),
    (16, "server sign-in state shared by every server process: /ui sessions (id hashed), pending OIDC logins",
     PG_SESSIONS),
    (17, "workers record their Dramatiq broker id: a silent worker's fetched messages are requeued",
     _V17_BROKER_IDS),
    (18, "rate limits keep the running totals of their grants (a take no longer counts the window)",
     PG_RATE_TOTALS),
    (19, "audit events in chain format 2, linked in the database (sealflow_chain_link); the hot path in one "
         "statement a batch: submits, claims, carried steps, runs' ends (sealflow_hot_batch)",
     CHAIN_LINK + HOT_FUNCTIONS),
    (20, "attempts.error_trace: the traceback of the exception an attempt's code raised", _V20_ERROR_TRACE),
    (21, "the event inbox: events kept for the runs that wait for them (wait: {event: ...})", PG_INBOX),
    (22, "run tags: the submitter's name=value labels of a run, to find it by", RUN_TAGS),
]
LATEST = MIGRATIONS[-1][0]


class SchemaTooOld(StoreError):
    """The database's schema is older than this sealflow's; migrate it (``migrate_store``, ``?migrate=1``)."""


def current_version(conn: psycopg.Connection) -> int:
    """The schema version of the database ``conn`` (psycopg, autocommit) points at; 0 when empty."""
    with conn.transaction():  # under the migrations' lock: two first openers create the table once
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY, "
                     "description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)")
        got = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
        assert got is not None  # an aggregate: one row
        return int(got[0])


def check(conn: psycopg.Connection, where: str, *, target: int = LATEST) -> int:
    """Refuse a schema newer than this sealflow understands; return the current version."""
    version = current_version(conn)
    if version > LATEST:
        raise SchemaTooNew(f"PostgreSQL store {where} is at schema version {version}, newer than this sealflow "
                           f"understands ({LATEST}); upgrade sealflow, or point --store at another database")
    return version


def migrate(conn: psycopg.Connection, where: str, *, target: int = LATEST, schema: str | None = None) -> list[int]:
    """Bring the database to ``target`` (each step one transaction); return the versions applied. A
    ``schema`` named in the store URL is created first when it does not exist yet."""
    if schema:
        from psycopg import sql as pgsql

        with conn.transaction():
            conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(schema)))
    check(conn, where)
    applied: list[int] = []
    for number, description, sql in MIGRATIONS:
        if number > target:
            break
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            got = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            assert got is not None  # an aggregate: one row
            if got[0] >= number:
                continue  # applied earlier, or by another process meanwhile
            conn.execute(sql)
            conn.execute("INSERT INTO schema_version (version, description, applied_at) VALUES (%s, %s, %s)",
                         (number, description, time.time()))
            applied.append(number)
    return applied
