"""What only the SQLite backend has: its file, migrations, and triggers."""

from __future__ import annotations

import sqlite3

import pytest

from sealflow.store import SchemaTooNew, StoreURLError, open_store
from sealflow.store.sqlite.schema import LATEST, migrate


def test_open_store_reads_the_url_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SEALFLOW_STORE", f"sqlite:///{tmp_path}/env.db")
    s = open_store()
    try:
        assert s.url.endswith("env.db") and (tmp_path / "env.db").exists()
    finally:
        s.close()


def test_unknown_store_urls_say_what_to_write():
    with pytest.raises(StoreURLError, match="sqlite:///"):
        open_store("mysql://db")
    with pytest.raises(StoreURLError, match="not available"):
        open_store("redis://localhost")


def test_an_older_database_is_migrated_on_open(tmp_path):
    # Given a database written at schema version 1 with a run in it
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, target=1) == 1
    conn.execute("INSERT INTO plans VALUES ('d', 'wf', 1, '{}', 0)")
    conn.execute("INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, initiator, "
                 "input_hash, created_at, updated_at) "
                 "VALUES ('r1', 't', 'wf', 1, 'd', '{}', 'queued', 1, 'u', 'h', 0, 0)")
    conn.close()
    # When the store opens it
    s = open_store(f"sqlite:///{path}")
    try:
        # Then it is at the latest version and the old run reads back with the new column's default
        assert s.schema_version() == LATEST
        run = s.get_run("r1")
        assert (run.state, run.priority) == ("queued", "normal")
    finally:
        s.close()


def test_a_newer_database_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "new.db"
    s = open_store(f"sqlite:///{path}")
    s.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
    conn.close()
    with pytest.raises(SchemaTooNew, match="upgrade sealflow"):
        open_store(f"sqlite:///{path}")


def test_audit_rows_cannot_be_updated_or_deleted(tmp_path):
    path = tmp_path / "a.db"
    s = open_store(f"sqlite:///{path}")
    from sealflow.store import AuditEvent

    s.append_audit(AuditEvent("note", run_id="r"), 0.0)
    s.close()
    conn = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE audit SET event = 'forged'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM audit")
    assert conn.execute("SELECT event FROM audit").fetchall() == [("note",)]
    conn.close()


def test_the_database_uses_wal(tmp_path):
    path = tmp_path / "w.db"
    s = open_store(f"sqlite:///{path}")
    s.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_given_nothing_due_when_sweeping_and_dispatching_then_no_write_transaction_is_begun(tmp_path):
    # Given a store with a claimed attempt (its lease runs 30 s), and another connection holding the file's
    # write lock (a writer of another process) past this store's busy timeout
    from test_store_suite import T0, submit_and_claim

    from sealflow.store import StoreUnavailable
    from sealflow.store.sqlite.store import SqliteStore

    store = SqliteStore(str(tmp_path / "state.db"), busy_timeout_ms=100)
    other = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    try:
        submit_and_claim(store)
        other.execute("BEGIN IMMEDIATE")
        # When it sweeps and dispatches while nothing is due
        # Then both find nothing without asking for the write lock (a read tells them)
        assert not store.sweep_due(T0 + 1)
        report = store.sweep(T0 + 1)
        assert (report.leases_expired, report.timers_fired, report.redelivered) == (0, 0, 0)
        assert store.take_outbox(T0 + 1) == []
        # And once the lease has expired, the sweep does ask for it (and says the file is locked)
        assert store.sweep_due(T0 + 31)
        with pytest.raises(StoreUnavailable, match="locked"):
            store.sweep(T0 + 31)
        other.execute("ROLLBACK")
        assert store.sweep(T0 + 31).leases_expired == 1
    finally:
        other.close()
        store.close()


def test_an_older_databases_attempts_gain_their_traceback_column(tmp_path):
    # Given a database at schema version 21 with a failed attempt in it
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, target=21) == 21
    conn.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, error_class, "
                 "error_message, seq) VALUES ('r1', 'a', 1, 1, 'failed', 7, 1000, 'internal', 'KeyError', 1)")
    conn.close()
    # When the store opens it (migration 22)
    s = open_store(f"sqlite:///{path}")
    try:
        # Then the old attempt reads back without a traceback, and the column takes one
        (att,) = s.attempts("r1")
        assert (att.error_message, att.error_trace) == ("KeyError", None)
        assert [r[1] for r in s._read("PRAGMA table_info(attempts)")][-1] == "error_trace"
    finally:
        s.close()


def test_rate_limit_grants_of_an_older_database_get_their_running_totals(tmp_path):
    # Given a database at schema version 18 with grants of two models, one of them without its limit row
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, target=18) == 18
    conn.execute("INSERT INTO rate_limits (model, updated_at) VALUES ('m', 5)")
    conn.executemany("INSERT INTO rate_grants (key, model, at, tokens) VALUES (?, ?, ?, ?)",
                     [("a", "m", 1, 100), ("b", "m", 5, 30), ("c", "orphan", 7, 9)])
    conn.close()
    # When the store opens it (migration 19)
    s = open_store(f"sqlite:///{path}")
    try:
        # Then each model's totals are its grants' count and token sum
        got = s._read("SELECT model, requests, tokens, updated_at FROM rate_limits ORDER BY model")
        assert [tuple(r) for r in got] == [("m", 2, 130, 5.0), ("orphan", 1, 9, 7.0)]
    finally:
        s.close()
