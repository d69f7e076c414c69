"""The demo world's embedded SQLite store: where it lives, its tables, and exactly-once effects.

The file is, in order of precedence: the path given to :func:`configure`, the
environment variable ``SEALFLOW_DEMO_DB``, or ``.sealflow/demo.db`` under the current
directory. It is created and seeded (:mod:`.seed`) on first use. Every write runs in
one ``BEGIN IMMEDIATE`` transaction, so concurrent workers (threads or processes)
serialise on it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sealflow.demo import seed

ENV_VAR = "SEALFLOW_DEMO_DB"
DEFAULT_PATH = Path(".sealflow") / "demo.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS effects (action TEXT, key TEXT, args TEXT, result TEXT, run_id TEXT,
    PRIMARY KEY (action, key));
CREATE TABLE IF NOT EXISTS leads (lead_id TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lead_notes (id INTEGER PRIMARY KEY, note_id TEXT UNIQUE, lead_id TEXT, note TEXT,
    run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, message_id TEXT UNIQUE, "to" TEXT, template TEXT,
    subject TEXT, body TEXT, vars TEXT, run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS documents (document_id TEXT PRIMARY KEY, title TEXT, content_type TEXT,
    source_url TEXT, latest_revision INTEGER, body TEXT);
CREATE TABLE IF NOT EXISTS doc_texts (document_id TEXT, revision INTEGER, text TEXT, extractor TEXT,
    pages INTEGER, PRIMARY KEY (document_id, revision));
CREATE TABLE IF NOT EXISTS doc_chunks (chunks_key TEXT, idx INTEGER, text TEXT, PRIMARY KEY (chunks_key, idx));
CREATE TABLE IF NOT EXISTS vectors (vectors_key TEXT, idx INTEGER, vector TEXT, PRIMARY KEY (vectors_key, idx));
CREATE TABLE IF NOT EXISTS index_entries (namespace TEXT, document_id TEXT, revision INTEGER, idx INTEGER,
    vector TEXT, metadata TEXT, PRIMARY KEY (namespace, document_id, revision, idx));
CREATE TABLE IF NOT EXISTS doc_status (document_id TEXT, revision INTEGER, status TEXT, detail TEXT,
    run_id TEXT, PRIMARY KEY (document_id, revision));
CREATE TABLE IF NOT EXISTS uploads (object_key TEXT PRIMARY KEY, uploader_id TEXT, content_type TEXT,
    width INTEGER, height INTEGER, bytes INTEGER, malware TEXT);
CREATE TABLE IF NOT EXISTS quarantine (quarantine_key TEXT PRIMARY KEY, image_id TEXT, object_key TEXT,
    sha256 TEXT, status TEXT, reason TEXT, retain_days INTEGER);
CREATE TABLE IF NOT EXISTS processed (quarantine_key TEXT, name TEXT, key TEXT, width INTEGER, height INTEGER,
    bytes INTEGER, PRIMARY KEY (quarantine_key, name));
CREATE TABLE IF NOT EXISTS stored_images (image_id TEXT, version TEXT, name TEXT, key TEXT, metadata TEXT,
    PRIMARY KEY (image_id, version, name));
CREATE TABLE IF NOT EXISTS publications (id INTEGER PRIMARY KEY, publication_id TEXT UNIQUE, image_id TEXT,
    version TEXT, url TEXT, alt_text TEXT, keys TEXT, run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS notifications (id INTEGER PRIMARY KEY, notification_id TEXT UNIQUE, user_id TEXT,
    template TEXT, data TEXT, run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS tickets (ticket_id TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ticket_replies (id INTEGER PRIMARY KEY, reply_id TEXT UNIQUE, ticket_id TEXT, body TEXT,
    visibility TEXT, run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS kb_articles (article_id TEXT PRIMARY KEY, title TEXT, body TEXT);
CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, customer_id TEXT, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metric_baselines (metric TEXT, dims TEXT, "values" TEXT);
CREATE TABLE IF NOT EXISTS incident_catalogue (id INTEGER PRIMARY KEY, severity TEXT, title TEXT, workflow TEXT,
    duration_minutes INTEGER);
CREATE TABLE IF NOT EXISTS report_archive (id INTEGER PRIMARY KEY, archive_id TEXT UNIQUE, kind TEXT, period TEXT,
    report TEXT, message_id TEXT, run_id TEXT, idempotency_key TEXT);
CREATE TABLE IF NOT EXISTS render_jobs (job_id TEXT PRIMARY KEY, prompt TEXT, size TEXT, callback_url TEXT,
    callback_token TEXT, run_id TEXT, idempotency_key TEXT UNIQUE);
CREATE TABLE IF NOT EXISTS scan_requests (scan_id TEXT PRIMARY KEY, image_url TEXT, run_id TEXT,
    idempotency_key TEXT UNIQUE);
"""
TABLES = ("meta", "effects", "leads", "lead_notes", "outbox", "documents", "doc_texts", "doc_chunks", "vectors",
          "index_entries", "doc_status", "uploads", "quarantine", "processed", "stored_images", "publications",
          "notifications", "tickets", "ticket_replies", "kb_articles", "orders", "metric_baselines",
          "incident_catalogue", "report_archive", "render_jobs", "scan_requests")
_JSON_COLUMNS = {"record", "vars", "data", "metadata", "keys", "vector", "args", "result", "dims", "values", "report"}

_configured: Path | None = None
_ready: set[str] = set()
_lock = threading.Lock()


def configure(path: str | os.PathLike[str] | None) -> Path:
    """Use ``path`` for the demo database from now on (``None``: back to the env var or default)."""
    global _configured
    _configured = Path(path) if path is not None else None
    return db_path()


def db_path() -> Path:
    """The database file in use (see the module docstring)."""
    if _configured is not None:
        return _configured
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_PATH


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def _ensure(path: Path) -> None:
    key = str(path.resolve())
    with _lock:
        if key in _ready and path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = _open(path)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("SELECT 1 FROM meta WHERE key = 'seeded'").fetchone() is None:
                seed.load(conn)
                conn.execute("INSERT INTO meta VALUES ('seeded', '1')")
            conn.execute("COMMIT")
        finally:
            conn.close()
        _ready.add(key)


@contextmanager
def connect(path: str | os.PathLike[str] | None = None, *, write: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to the (created and seeded) database; ``write`` wraps it in one transaction."""
    target = Path(path) if path is not None else db_path()
    _ensure(target)
    conn = _open(target)
    try:
        if write:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        else:
            yield conn
    finally:
        conn.close()


def reset(path: str | os.PathLike[str] | None = None) -> None:
    """Empty the demo database and seed it again."""
    target = Path(path) if path is not None else db_path()
    if target.exists():
        conn = _open(target)
        try:
            for table in TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
        finally:
            conn.close()
    with _lock:
        _ready.discard(str(target.resolve()))
    _ensure(target)


def once(ctx: Any, action: str, args: dict[str, Any],
         perform: Callable[[sqlite3.Connection], dict[str, Any]]) -> dict[str, Any]:
    """Run ``perform(conn)`` at most once per ``(action, ctx.idempotency_key)``.

    A repeated key returns the recorded result and performs nothing (the arguments of
    the repeat are not compared: the key alone names the effect). Without a key the
    effect runs every time. The effect and its ledger row commit together.
    """
    key = idempotency_key(ctx)
    with connect(write=True) as conn:
        if key is not None:
            row = conn.execute("SELECT result FROM effects WHERE action = ? AND key = ?", (action, key)).fetchone()
            if row is not None:
                recorded: dict[str, Any] = json.loads(row["result"])
                return recorded
        result = perform(conn)
        if key is not None:
            conn.execute("INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
                         (action, key, dumps(args), dumps(result), run_id(ctx)))
        return result


def next_id(conn: sqlite3.Connection, table: str, prefix: str) -> tuple[int, str]:
    """The next integer id of ``table`` and its public form ``prefix_000001`` (call inside a write)."""
    n = conn.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}").fetchone()[0]
    return n, f"{prefix}_{n:06d}"


def rows(table: str, path: str | os.PathLike[str] | None = None, **where: Any) -> list[dict[str, Any]]:
    """Rows of ``table`` (filtered by equality on ``where``) as dicts, JSON columns decoded."""
    if table not in TABLES:
        raise ValueError(f"no demo table {table!r}; tables: {', '.join(TABLES)}")
    clause = " AND ".join(f'"{k}" = ?' for k in where)
    sql = f"SELECT * FROM {table}" + (f" WHERE {clause}" if clause else "") + " ORDER BY rowid"
    with connect(path) as conn:
        return [_decode(dict(r)) for r in conn.execute(sql, tuple(where.values()))]


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for k in _JSON_COLUMNS & row.keys():
        if isinstance(row[k], str):
            row[k] = json.loads(row[k])
    return row


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def idempotency_key(ctx: Any) -> str | None:
    value = getattr(ctx, "idempotency_key", None)
    return None if value is None else str(value)


def run_id(ctx: Any) -> str | None:
    value = getattr(ctx, "run_id", None)
    return None if value is None else str(value)
