"""The SQLite schema, as an ordered list of migrations.

``schema_version`` holds one row per applied migration. Opening an older
database applies the missing migrations in order, each in its own
transaction; a database whose version is newer than :data:`LATEST` is refused
(:class:`SchemaTooNew`) rather than guessed at. Append migrations; never edit
one that has shipped. Numbers may skip (branches reserve theirs); they only increase.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from sealflow.store.errors import SchemaTooNew

# Indexes are few on purpose: every index is one more page written per step. A run's single
# active attempt is found through runs.cursor_step/cursor_attempt (a primary-key lookup), and
# the outbox holds only messages not yet claimed (a claim deletes its row by primary key).
_V1 = """
CREATE TABLE plans (
  digest TEXT PRIMARY KEY, workflow TEXT NOT NULL, version INTEGER NOT NULL,
  body TEXT NOT NULL, created_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE runs (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, workflow TEXT NOT NULL, workflow_version INTEGER NOT NULL,
  plan_digest TEXT NOT NULL REFERENCES plans(digest), input TEXT NOT NULL, state TEXT NOT NULL,
  rev INTEGER NOT NULL, initiator TEXT NOT NULL, idempotency_key TEXT, input_hash TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, deadline REAL, output TEXT,
  error_class TEXT, error_message TEXT,
  steps_executed INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0,
  cost_usd REAL NOT NULL DEFAULT 0, tool_calls INTEGER NOT NULL DEFAULT 0,
  redrives INTEGER NOT NULL DEFAULT 0, cursor_step TEXT, cursor_attempt INTEGER
) WITHOUT ROWID;
CREATE UNIQUE INDEX runs_idempotency ON runs(tenant, workflow, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_state ON runs(state);

CREATE TABLE attempts (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL, try_no INTEGER NOT NULL,
  state TEXT NOT NULL, token INTEGER NOT NULL, lease_owner TEXT, lease_expires REAL,
  lease_ms INTEGER NOT NULL, scheduled_at REAL, started_at REAL, ended_at REAL, due_at REAL,
  output TEXT, error_class TEXT, error_message TEXT, data TEXT,
  seq INTEGER NOT NULL,  -- the run's revision that created it: orders a run's attempts
  PRIMARY KEY (run_id, step_id, attempt)
) WITHOUT ROWID;

CREATE TABLE results (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, status TEXT NOT NULL, output TEXT,
  PRIMARY KEY (run_id, step_id)
) WITHOUT ROWID;

CREATE TABLE ledger (
  tenant TEXT NOT NULL, key TEXT NOT NULL, run_id TEXT NOT NULL, step_id TEXT NOT NULL,
  result TEXT, created_at REAL NOT NULL,
  PRIMARY KEY (tenant, key)
) WITHOUT ROWID;

CREATE TABLE outbox (
  run_id TEXT NOT NULL, step_id TEXT NOT NULL, attempt INTEGER NOT NULL, token INTEGER NOT NULL,
  due_at REAL NOT NULL, sent_at REAL,
  PRIMARY KEY (run_id, step_id, attempt, token)
) WITHOUT ROWID;
CREATE INDEX outbox_unsent ON outbox(due_at) WHERE sent_at IS NULL;

CREATE TABLE timers (
  id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step_id TEXT, attempt INTEGER, token INTEGER,
  kind TEXT NOT NULL CHECK (kind IN ('backoff','wait','approval_timeout','run_deadline')),
  fire_at REAL NOT NULL
);
CREATE INDEX timers_fire ON timers(fire_at);
CREATE INDEX timers_run ON timers(run_id);

CREATE TABLE dead_letters (
  run_id TEXT PRIMARY KEY, step_id TEXT, reason TEXT NOT NULL, error_class TEXT NOT NULL,
  fingerprint TEXT NOT NULL, redrive_count INTEGER NOT NULL DEFAULT 0,
  quarantined INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, step_id TEXT, event TEXT NOT NULL,
  actor TEXT NOT NULL, state_before TEXT, state_after TEXT, detail TEXT, ts REAL NOT NULL
);
CREATE INDEX audit_run ON audit(run_id, id);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: append a new event instead'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
  BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: append a new event instead'); END;
"""

_V2 = """
ALTER TABLE runs ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal';
CREATE INDEX dead_letters_status ON dead_letters(status);
"""

# security (principals, tenants): who a run acts as (its initiator, or a schedule's run_as service),
# whether it was submitted in open development mode, and tenant-scoped listing
_V3_SECURITY = """
ALTER TABLE runs ADD COLUMN acting_as TEXT;
ALTER TABLE runs ADD COLUMN access_mode TEXT;
CREATE INDEX runs_tenant_state ON runs(tenant, state);
"""

# the heads of the audit chains only move forward: a head cannot be deleted (a wiped tenant), moved back
# (a cut tail hidden with it) or rewritten at its seq; the audit table's own triggers refuse edits
_V7_HEADS = """
CREATE TRIGGER audit_heads_no_delete BEFORE DELETE ON audit_heads
  BEGIN SELECT RAISE(ABORT, 'audit heads only move forward: a head cannot be deleted'); END;
CREATE TRIGGER audit_heads_forward BEFORE UPDATE ON audit_heads
  WHEN NEW.tenant IS NOT OLD.tenant OR NEW.seq < OLD.seq OR (NEW.seq = OLD.seq AND NEW.hash IS NOT OLD.hash)
  BEGIN SELECT RAISE(ABORT, 'audit heads only move forward: a head cannot move back or be rewritten'); END;
"""


# poison steps: how many times an attempt's lease expired (its worker died or stalled); a claim of an
# attempt that lost its lease records it as failed with worker_lost instead of running it again
_V10_LEASES_LOST = """
ALTER TABLE attempts ADD COLUMN leases_lost INTEGER NOT NULL DEFAULT 0;
"""


# the audit chain's format of each event (NULL: format 1, the events appended before), see store/auditverify.py
_V20_CHAIN_V = """
ALTER TABLE audit ADD COLUMN chain_v INTEGER;
"""


# an action's exception: its traceback, kept with the failed attempt (redacted, bounded: core/tracebacks.py)
_V22_ERROR_TRACE = """
ALTER TABLE attempts ADD COLUMN error_trace TEXT;
"""


def _audit_rowid(conn: sqlite3.Connection) -> None:
    """The audit table without AUTOINCREMENT: audit rows are never deleted (retention keeps them), so an id
    is never reused anyway, and AUTOINCREMENT's counter (a row of ``sqlite_sequence``) was one more page written
    to the WAL at every commit that appends an event. Rebuilt as it was: rows, ids, and every index and trigger
    on it (re-created from their own SQL)."""
    cols = [r[1] for r in conn.execute("PRAGMA table_info(audit)")]
    decl = ", ".join(f"{name} {kind}{' NOT NULL' if notnull else ''}{'' if d is None else f' DEFAULT {d}'}"
                     for _, name, kind, notnull, d, _pk in conn.execute("PRAGMA table_info(audit)") if name != "id")
    attached = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE tbl_name = 'audit' AND type IN "
                                           "('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name")]
    conn.execute(f"CREATE TABLE audit_rowid (id INTEGER PRIMARY KEY, {decl})")
    listed = ", ".join(cols)
    conn.execute(f"INSERT INTO audit_rowid ({listed}) SELECT {listed} FROM audit ORDER BY id")
    conn.execute("DROP TABLE audit")  # (its indexes and triggers with it)
    conn.execute("ALTER TABLE audit_rowid RENAME TO audit")
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'audit'")
    for sql in attached:
        conn.execute(sql)


def _statements(sql: str) -> Callable[[sqlite3.Connection], None]:
    # one statement at a time (a trigger body holds ';' until its END;)
    def apply(conn: sqlite3.Connection) -> None:
        buf: list[str] = []
        in_trigger = False
        for line in sql.splitlines():
            buf.append(line)
            stripped = line.strip()
            if stripped.startswith("CREATE TRIGGER"):
                in_trigger = True
            if (in_trigger and stripped.endswith("END;")) or (not in_trigger and stripped.endswith(";")):
                conn.execute("\n".join(buf))
                buf = []
                in_trigger = False

    return apply


def _audit_chain(conn: sqlite3.Connection) -> None:
    # the chain's columns and heads, the tenants' daily usage; existing events are chained in id order
    from sealflow.store.auditchain import migrate as chain_migrate

    chain_migrate(conn)


def _definitions(conn: sqlite3.Connection) -> None:
    from sealflow.store.definitions import SCHEMA

    _statements(SCHEMA)(conn)


def _definition_sources(conn: sqlite3.Connection) -> None:
    from sealflow.store.definitions import SCHEMA_SOURCES

    _statements(SCHEMA_SOURCES)(conn)


def _slots(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.slots import SCHEMA

    _statements(SCHEMA)(conn)


def _api(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.tokens import SCHEMA

    _statements(SCHEMA)(conn)


def _events(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.events import SCHEMA

    _statements(SCHEMA)(conn)


def _tags(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.tags import SCHEMA

    _statements(SCHEMA)(conn)


def _inbox(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.inbox import SCHEMA

    _statements(SCHEMA)(conn)


def _reservations(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.reservations import SCHEMA

    _statements(SCHEMA)(conn)


def _ratelimits(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.ratelimits import SCHEMA

    _statements(SCHEMA)(conn)


def _rate_totals(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.ratelimits import TOTALS_BACKFILL, TOTALS_SQLITE

    _statements(TOTALS_SQLITE + TOTALS_BACKFILL)(conn)


def _deliveries(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.deliveries import SCHEMA

    _statements(SCHEMA)(conn)


def _sessions(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.sessions import SCHEMA

    _statements(SCHEMA)(conn)


def _children(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.children import SCHEMA

    _statements(SCHEMA)(conn)


def _breakers(conn: sqlite3.Connection) -> None:
    from sealflow.store.sql.breakers import SCHEMA

    _statements(SCHEMA)(conn)


#: (version, description, function); applied in order (numbers may skip: each branch of work owns its own)
MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
    (1, "runs, plans, attempts, results, ledger, outbox, timers, dead letters, audit", _statements(_V1)),
    (2, "runs.priority; dead_letters status index", _statements(_V2)),
    (3, "runs.acting_as, runs.access_mode; runs by tenant and state", _statements(_V3_SECURITY)),
    (4, "audit hash chain per tenant (columns, heads, backfill); tenant daily usage", _audit_chain),
    (5, "definition registry (versions, digests, signers, pins); runs.signer", _definitions),
    (6, "definition sources (the submitted bytes and signature envelopes); definitions.refused", _definition_sources),
    (7, "audit heads only move forward (no delete, no move back)", _statements(_V7_HEADS)),
    (8, "lease slots for locks and pools: names (fencing tokens), holders, arrival-ordered waiters", _slots),
    (9, "circuit breakers shared by every process", _breakers),
    (10, "attempts.leases_lost (a lost lease counts as a failed attempt)", _statements(_V10_LEASES_LOST)),
    (11, "API tokens (hashed secrets, expiry, revocation); runs by tenant and creation time", _api),
    (13, "signed events: the first answer per event id, the last sequence applied per ordering key", _events),
    (14, "usage reservations: a model call's worst case held against the tenant's daily quota", _reservations),
    (15, "per-model rate limits shared by every process: the calls granted in the last window", _ratelimits),
    (16, "approval notifications: one delivery row per channel, written with the gate that opens", _deliveries),
    (17, "fan-out: child runs (parent run, step, attempt, item index, item) and their counters", _children),
    (18, "server sign-in state shared by every server process: /ui sessions (id hashed), pending OIDC logins",
     _sessions),
    (19, "rate limits keep the running totals of their grants (a take no longer counts the window)", _rate_totals),
    (20, "audit.chain_v: events are chained in format 2 (their content's hash linked to the chain)",
     _statements(_V20_CHAIN_V)),
    (21, "audit ids without AUTOINCREMENT (never deleted, so never reused): one page fewer written per commit",
     _audit_rowid),
    (22, "attempts.error_trace: the traceback of the exception an attempt's code raised",
     _statements(_V22_ERROR_TRACE)),
    (23, "the event inbox: events kept for the runs that wait for them (wait: {event: ...})", _inbox),
    (24, "run tags: the submitter's name=value labels of a run, to find it by", _tags),
]
LATEST = MIGRATIONS[-1][0]


def current_version(conn: sqlite3.Connection) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                 "description TEXT NOT NULL, applied_at REAL NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def migrate(conn: sqlite3.Connection, *, target: int = LATEST, path: str = "") -> int:
    """Bring the database to ``target``; return the version it is at afterwards."""
    version = current_version(conn)
    if version > LATEST:
        raise SchemaTooNew(
            f"state database {path or ''} is at schema version {version}, newer than this sealflow "
            f"understands ({LATEST}); upgrade sealflow, or point SEALFLOW_STORE at another file"
        )
    for number, description, apply in MIGRATIONS:
        if version < number <= target:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if current_version(conn) >= number:  # another process migrated meanwhile
                    conn.execute("ROLLBACK")
                    continue
                apply(conn)
                conn.execute("INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                             (number, description, time.time()))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            version = number
    return version
