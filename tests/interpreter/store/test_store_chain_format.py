"""The audit chain's formats on every backend: a store holding events of format 1 (appended before SQLite
migration 20 / PostgreSQL 19) goes on chaining in format 2 after the upgrade, and verification checks each
event by its own format: the chain holds across the two, and an edit of either kind of event is found.

Given / When / Then in each test.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from sealflow.store import AuditEvent, auditchain, open_store
from sealflow.store.auditverify import GENESIS, body_hash, event_hash, link_hash, row_hash
from sealflow.store.postgres import migrate as pg_migrate
from sealflow.store.sqlite.schema import migrate as sqlite_migrate

T0 = 1_700_000_000.0
_V1_COLS = ("run_id, step_id, event, actor, state_before, state_after, detail, ts, tenant, workflow, workflow_version, "
            "plan_digest, decision, tool, summary, error, seq, prev_hash, hash")


def v1_events(tenant: str, count: int) -> tuple[list[tuple], tuple[int, str]]:
    """``count`` events of ``tenant`` chained in format 1, and the head they end at."""
    out, prev = [], GENESIS
    for seq in range(1, count + 1):
        detail = json.dumps({"tenant": tenant, "n": seq, "text": "é\n\"q\""})
        digest = event_hash(tenant, seq, prev, T0 + seq, None, None, None, None, None, "old.event", "user:ana", None,
                            None, None, None, None, None, detail)
        out.append((None, None, "old.event", "user:ana", None, None, detail, T0 + seq, tenant, None, None, None, None,
                    None, None, None, seq, prev, digest))
        prev = digest
    return out, (count, prev)


@pytest.fixture(params=["sqlite", "postgres"])
def upgraded(request, tmp_path):
    """A store of each backend that held three format 1 events of tenant acme before its upgrade, opened (and so
    migrated) afterwards; yields ``(store, write)``, ``write(sql, args)`` running SQL on it directly."""
    events, head = v1_events("acme", 3)
    if request.param == "sqlite":
        path = tmp_path / "state.db"
        conn = sqlite3.connect(path, isolation_level=None)
        sqlite_migrate(conn, target=19)
        conn.executemany(f"INSERT INTO audit ({_V1_COLS}) VALUES ({','.join('?' * 19)})", events)
        conn.execute("INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, ?, ?)", ("acme", *head))
        conn.close()
        store = open_store(f"sqlite:///{path}")

        def write(sql, args=()):
            with sqlite3.connect(path, isolation_level=None) as c:
                c.execute("DROP TRIGGER IF EXISTS audit_no_update")
                c.execute(sql, args)
    else:
        schema = request.getfixturevalue("pg_schema")
        pg_migrate(schema.url(), target=18)
        with schema.connect() as conn:
            conn.cursor().executemany(f"INSERT INTO audit ({_V1_COLS}) VALUES ({','.join(['%s'] * 19)})", events)
            conn.execute("INSERT INTO audit_heads (tenant, seq, hash) VALUES (%s, %s, %s)", ("acme", *head))
        store = open_store(schema.url(clock="caller", migrate="1"))

        def write(sql, args=()):
            with schema.connect() as c:
                c.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
                c.execute(sql.replace("?", "%s"), args)
    yield store, write
    store.close()


def test_a_chain_of_format_1_goes_on_in_format_2_and_verifies_across_the_two(upgraded):
    store, _ = upgraded
    # When new events are appended after the upgrade
    for n in range(2):
        store.append_audit(AuditEvent("new.event", actor="user:ben", tenant="acme", detail={"n": n}), T0 + 10 + n)
    # Then they continue the chain (seq 4, 5, each linked to the one before) in format 2, and it verifies
    chain = store.audit_chain("acme")
    assert [(r[2], r[11], r[20]) for r in chain] == [(1, "old.event", None), (2, "old.event", None),
                                                    (3, "old.event", None), (4, "new.event", 2), (5, "new.event", 2)]
    assert chain[3][3] == chain[2][4] and all(row_hash(r) == r[4] for r in chain)
    report = auditchain.verify(store)
    assert report.ok and report.events == {"acme": 5}


@pytest.mark.parametrize("seq", [2, 4])
def test_an_edited_event_of_either_format_is_found(upgraded, seq):
    store, write = upgraded
    store.append_audit(AuditEvent("new.event", actor="user:ben", tenant="acme"), T0 + 10)
    store.append_audit(AuditEvent("new.event", actor="user:ben", tenant="acme"), T0 + 11)
    # When an event (format 1 at seq 2, format 2 at seq 4) is edited in place
    write("UPDATE audit SET actor = 'user:mallory' WHERE tenant = 'acme' AND seq = ?", (seq,))
    # Then verify names it
    first = auditchain.verify(store, "acme").first
    assert (first.seq, first.problem) == (seq, "edited")


def test_an_event_claiming_a_format_no_sealflow_writes_is_found(upgraded):
    store, write = upgraded
    store.append_audit(AuditEvent("new.event", actor="user:ben", tenant="acme"), T0 + 10)
    # When an event's format is changed (to make a forged hash of another formula pass)
    write("UPDATE audit SET chain_v = 7 WHERE tenant = 'acme' AND seq = 4")
    # Then verify refuses it
    first = auditchain.verify(store, "acme").first
    assert (first.seq, first.problem) == (4, "edited") and "format 7" in first.message


def test_format_2_is_a_link_of_the_content_hash_and_the_content_covers_every_field():
    # Given an event's fields, When any one of them changes, Then its content hash changes
    fields = ["acme", T0, "wf", 1, "sha256:d", "r1", "a", "step.succeeded", "w1", "running", "succeeded", None,
              "t.a", "7B sha256:x", None, '{"k": 1}']
    base = body_hash(*fields)
    for i, value in enumerate(fields):
        changed = list(fields)
        changed[i] = "x" if value != "x" else "y"
        assert body_hash(*changed) != base, i
    # and the link binds the content to its place (seq) and its predecessor
    assert len({link_hash("", 1, base), link_hash("", 2, base), link_hash("a" * 64, 1, base)}) == 3


def test_the_audit_table_rebuilt_without_autoincrement_keeps_its_rows_ids_chain_and_guards(tmp_path):
    # Given a store at SQLite schema 20 holding events (ids with a gap, as from a rolled-back append)
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    sqlite_migrate(conn, target=20)
    events, head = v1_events("acme", 3)
    conn.executemany(f"INSERT INTO audit ({_V1_COLS}) VALUES ({','.join('?' * 19)})", events)
    conn.execute("INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, ?, ?)", ("acme", *head))
    conn.execute("UPDATE sqlite_sequence SET seq = 10 WHERE name = 'audit'")  # (the next id would be 11)
    before = conn.execute("SELECT * FROM audit ORDER BY id").fetchall()
    conn.close()
    # When it is opened (migration 21) and an event is appended
    store = open_store(f"sqlite:///{path}")
    store.append_audit(AuditEvent("new.event", actor="user:ben", tenant="acme"), T0 + 10)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        # Then the rows and ids are as they were, the new one comes after them, and the chain verifies
        rows = conn.execute("SELECT * FROM audit ORDER BY id").fetchall()
        assert rows[:3] == before and rows[3][0] > before[-1][0]
        assert auditchain.verify(store).ok
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'audit'").fetchone()[0]
        assert "AUTOINCREMENT" not in sql
        # and the append-only guards and the run index are back
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'audit'")}
        assert {"audit_run", "audit_no_update", "audit_no_delete"} <= names
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM audit WHERE id = ?", (rows[0][0],))
    finally:
        conn.close()
        store.close()
