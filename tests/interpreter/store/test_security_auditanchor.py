"""Audit anchors and the heads' triggers: a cut tail with its head moved back, a wiped tenant and a recomputed
chain all pass `audit verify` alone; against an anchor kept outside the store (`audit head --json`, signed with
the operator's key) each fails with a plain message naming the tenant. The heads table refuses deletes and
moving a head back, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest
from interp_helpers import S, make_plan

from sealflow.cli import main
from sealflow.dsl.trust import signing
from sealflow.execution.actions import action
from sealflow.store import AuditEvent, auditanchor, auditchain, open_store
from sealflow.store.auditchain import SqliteChain
from sealflow.store.sqlite.schema import migrate


@pytest.fixture
def chained(runtime, registry):
    """Given runs of two tenants on one store."""

    @action("t.work", registry=registry)
    def work(ctx, n):
        return {"n": n}

    plan = make_plan(S("a", "action", action="t.work", args={"n": 1}), S("b", "action", action="t.work",
                                                                          args={"n": 2}))
    for tenant in ("acme", "globex", "acme"):
        runtime.run(plan, {}, initiator="user:ana", tenant=tenant)
    return runtime


def cli(capsys, runtime, *argv) -> tuple[int, str, str]:
    code = main([*argv, "--store", f"sqlite:///{runtime.store.path}"])
    out, err = capsys.readouterr()
    return code, out, err


def anchor_of(capsys, runtime, tmp_path, *extra) -> str:
    """`audit head --json` written to a file, as an operator would ship it."""
    code, out, err = cli(capsys, runtime, "audit", "head", "--json", *extra)
    assert code == 0, err
    path = tmp_path / "anchor.json"
    path.write_text(out)
    return str(path)


def attacker(runtime) -> sqlite3.Connection:
    """The store's file opened directly with every guard trigger dropped (someone with write access to it)."""
    conn = sqlite3.connect(runtime.store.path, isolation_level=None)
    for trigger in ("audit_no_update", "audit_no_delete", "audit_heads_forward", "audit_heads_no_delete"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    return conn


def rows_of(conn, tenant) -> list[tuple]:
    return conn.execute(f"SELECT {auditchain.VERIFY_COLS} FROM audit WHERE tenant = ? ORDER BY id",
                        (tenant,)).fetchall()


def set_head(conn, tenant, seq, digest) -> None:
    conn.execute("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?", (seq, digest, tenant))


@pytest.fixture
def keys(tmp_path):
    key = signing.generate_key()
    (tmp_path / "op.pem").write_bytes(signing.private_pem(key))
    (tmp_path / "op.pub.pem").write_bytes(signing.public_pem(key.public_key()))
    other = signing.generate_key()
    (tmp_path / "other.pub.pem").write_bytes(signing.public_pem(other.public_key()))
    return str(tmp_path / "op.pem"), str(tmp_path / "op.pub.pem"), str(tmp_path / "other.pub.pem")


# -- the anchor ----------------------------------------------------------------------------------------

def test_head_prints_each_tenants_head_hash_and_count(chained, capsys, tmp_path):
    # When the operator takes an anchor
    doc = json.loads(Path(anchor_of(capsys, chained, tmp_path)).read_text())
    # Then it holds each tenant's count and head hash, as the chain has them
    report = auditchain.verify(chained.store)
    assert set(doc["tenants"]) == {"acme", "globex"} and "signature" not in doc
    for tenant, head in doc["tenants"].items():
        assert (head["count"], head["head_hash"]) == (report.events[tenant], report.heads[tenant])
        assert head["at"] > 0
    # and the text form names them too
    code, out, _ = cli(capsys, chained, "audit", "head")
    assert code == 0 and f"tenant acme: {report.events['acme']} events, head {report.heads['acme']}" in out


def test_a_chain_that_grew_since_the_anchor_still_extends_it(chained, capsys, tmp_path, keys):
    private, public, _ = keys
    path = anchor_of(capsys, chained, tmp_path, "--key", private)
    # Given more events after the anchor, and a tenant that did not exist then
    chained.store.append_audit(AuditEvent("operator.note", actor="user:ana", tenant="acme"), chained.clock.now())
    chained.store.append_audit(AuditEvent("operator.note", actor="user:ana", tenant="initech"), chained.clock.now())
    # When the chains are verified against the signed anchor
    code, out, err = cli(capsys, chained, "audit", "verify", "--anchor", path, "--public-key", public)
    # Then they pass, the signature checked
    assert code == 0, err
    assert "signature verified" in out and "BROKEN" not in out


def test_a_tail_cut_with_its_head_moved_back_fails_against_the_anchor(chained, capsys, tmp_path):
    path = anchor_of(capsys, chained, tmp_path)
    # Given an attacker deletes acme's last two events and moves its head back to the new last one
    conn = attacker(chained)
    rows = rows_of(conn, "acme")
    conn.execute("DELETE FROM audit WHERE id >= ?", (rows[-2][0],))
    set_head(conn, "acme", rows[-3][2], rows[-3][4])
    # Then the chain alone looks intact
    assert auditchain.verify(chained.store).ok
    # but against the anchor it fails, naming the tenant and what was cut
    code, out, err = cli(capsys, chained, "audit", "verify", "--anchor", path)
    assert code == 1 and "BROKEN  tenant acme" in out and "ok      tenant globex" in out
    assert f"tenant acme: the chain ends at seq {len(rows) - 2} but the anchor holds seq {len(rows)}" in err
    assert "the last 2 event(s) were cut" in err and "Traceback" not in err


def test_a_wiped_tenant_fails_against_the_anchor(chained, capsys, tmp_path):
    path = anchor_of(capsys, chained, tmp_path)
    # Given an attacker removes every event and the head of globex
    conn = attacker(chained)
    conn.execute("DELETE FROM audit WHERE tenant = 'globex'")
    conn.execute("DELETE FROM audit_heads WHERE tenant = 'globex'")
    assert auditchain.verify(chained.store).ok
    # Then against the anchor: globex was wiped
    code, out, _ = cli(capsys, chained, "audit", "verify", "--anchor", path, "--json")
    got = json.loads(out)
    assert code == 1 and not got["ok"]
    assert got["first_break"]["tenant"] == "globex" and got["first_break"]["problem"] == "wiped"
    assert "tenant globex: the anchor holds" in got["first_break"]["message"]
    assert "the tenant's audit was wiped" in got["first_break"]["message"]


def test_a_recomputed_chain_fails_against_the_anchor(chained, capsys, tmp_path):
    path = anchor_of(capsys, chained, tmp_path)
    # Given an attacker edits an early acme event and recomputes every hash after it, and the head
    conn = attacker(chained)
    prev = auditchain.GENESIS
    for i, row in enumerate(rows_of(conn, "acme")):
        row = list(row)
        if i == 2:
            row[12] = "user:mallory"
        row[3] = prev
        row[4] = prev = auditchain.row_hash(tuple(row))
        conn.execute("UPDATE audit SET actor = ?, prev_hash = ?, hash = ? WHERE id = ?", (row[12], row[3], row[4],
                                                                                           row[0]))
        last = row
    set_head(conn, "acme", last[2], last[4])
    assert auditchain.verify(chained.store).ok
    # Then against the anchor the anchored event is not there any more
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", path, "--tenant", "acme")
    assert code == 1 and f"tenant acme: the event at seq {last[2]} is not the anchored one" in err


def test_a_tampered_or_foreign_or_unsigned_anchor_is_refused(chained, capsys, tmp_path, keys):
    private, public, other = keys
    path = anchor_of(capsys, chained, tmp_path, "--key", private)
    # When the signed anchor is checked with another key / Then it is refused
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", path, "--public-key", other)
    assert code == 1 and "the signature does not verify" in err
    # When its count is lowered to match a cut tail / Then the signature no longer holds
    doc = json.loads(Path(path).read_text())
    doc["tenants"]["acme"]["count"] -= 2
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", str(tmp_path / "edited.json"),
                       "--public-key", public)
    assert code == 1 and "the anchor was altered, or signed by another key" in err
    # When the signature is removed / Then a public key given makes it required
    del doc["signature"]
    (tmp_path / "bare.json").write_text(json.dumps(doc))
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", str(tmp_path / "bare.json"),
                       "--public-key", public)
    assert code == 1 and "not signed, but a public key was given" in err


def test_an_unreadable_anchor_and_wrong_options_are_plain_usage_errors(chained, capsys, tmp_path, keys):
    (tmp_path / "junk.json").write_text('{"tenants": {}}')
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", str(tmp_path / "junk.json"))
    assert code == 1 and "not a sealflow audit anchor" in err
    code, _, err = cli(capsys, chained, "audit", "verify", "--anchor", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err
    code, _, err = cli(capsys, chained, "audit", "verify", "--public-key", keys[1])
    assert code == 2 and "--anchor FILE" in err
    code, _, err = cli(capsys, chained, "audit", "head", "--key", keys[0])
    assert code == 2 and "add --json" in err


def test_no_anchor_is_taken_of_a_broken_chain(chained, capsys):
    conn = attacker(chained)
    conn.execute("UPDATE audit SET actor = 'user:mallory' WHERE id = ?", (rows_of(conn, "acme")[1][0],))
    code, out, err = cli(capsys, chained, "audit", "head", "--json")
    assert code == 1 and out == "" and "tenant acme:" in err and "was edited" in err
    with pytest.raises(auditanchor.AnchorError, match="vouches for nothing"):
        auditanchor.take(chained.store, 0.0)


# -- the heads only move forward ---------------------------------------------------------------------

def test_sqlite_heads_refuse_deletes_and_moving_back(chained):
    conn = sqlite3.connect(chained.store.path, isolation_level=None)
    seq, digest = conn.execute("SELECT seq, hash FROM audit_heads WHERE tenant = 'acme'").fetchone()
    # When someone deletes a head, moves it back, or rewrites it in place / Then each is refused
    for sql, args in (("DELETE FROM audit_heads WHERE tenant = 'acme'", ()),
                      ("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = 'acme'", (seq - 1, digest)),
                      ("UPDATE audit_heads SET hash = ? WHERE tenant = 'acme'", ("0" * 64,)),
                      ("UPDATE audit_heads SET tenant = 'other' WHERE tenant = 'acme'", ())):
        with pytest.raises(sqlite3.IntegrityError, match="audit heads only move forward"):
            conn.execute(sql, args)
    assert conn.execute("SELECT seq, hash FROM audit_heads WHERE tenant = 'acme'").fetchone() == (seq, digest)
    # while appending still moves it forward
    chained.store.append_audit(AuditEvent("operator.note", tenant="acme"), chained.clock.now())
    assert conn.execute("SELECT seq FROM audit_heads WHERE tenant = 'acme'").fetchone()[0] == seq + 1


def test_an_older_sqlite_store_gets_the_heads_triggers(tmp_path):
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    migrate(conn, target=5)
    conn.execute("INSERT INTO audit_heads VALUES ('acme', 3, 'h')")
    conn.execute("DELETE FROM audit_heads")  # no guard before migration 7
    migrate(conn)
    conn.execute("INSERT INTO audit_heads VALUES ('acme', 3, 'h')")
    with pytest.raises(sqlite3.IntegrityError, match="audit heads only move forward"):
        conn.execute("DELETE FROM audit_heads")


def test_a_writer_that_lost_a_race_rechains_without_moving_any_head_back(tmp_path):
    # Given two processes' chains on one store, the first holding cached heads of tenants a and b
    path = tmp_path / "race.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn)
    first, second = SqliteChain(), SqliteChain()

    def append(chain, *tenants):
        conn.execute("BEGIN IMMEDIATE")
        chain.append(conn, [(None, None, "note", "user:ana", None, None, None, 1.0, {"tenant": t}) for t in tenants])
        conn.execute("COMMIT")

    append(first, "a", "b")
    # When the second appends to b, then the first appends to a (its head still as cached) and b (moved)
    append(second, "b")
    append(first, "a", "b")
    # Then the first chained again on the stored heads (a's head, already moved, was never moved back)
    store = open_store(f"sqlite:///{path}")
    try:
        report = auditchain.verify(store)
        assert report.ok and report.events == {"a": 2, "b": 3}
    finally:
        store.close()


def test_postgres_heads_refuse_deletes_moving_back_and_truncate(pg_schema):
    store = open_store(pg_schema.url(clock="caller", migrate="1"))
    try:
        store.append_audit(AuditEvent("operator.note", tenant="acme"), 1_700_000_000.0)
        store.append_audit(AuditEvent("operator.note", tenant="acme"), 1_700_000_001.0)
        with pg_schema.connect() as conn:
            seq, digest = conn.execute("SELECT seq, hash FROM audit_heads WHERE tenant = 'acme'").fetchone()
            for sql, args in (("DELETE FROM audit_heads WHERE tenant = 'acme'", ()),
                              ("UPDATE audit_heads SET seq = %s WHERE tenant = 'acme'", (seq - 1,)),
                              ("UPDATE audit_heads SET hash = %s WHERE tenant = 'acme'", ("0" * 64,)),
                              ("TRUNCATE audit_heads", ()), ("TRUNCATE audit", ())):
                with pytest.raises(psycopg.errors.RaiseException, match="only move forward|append-only"):
                    conn.execute(sql, args)
            assert conn.execute("SELECT seq, hash FROM audit_heads WHERE tenant = 'acme'").fetchone() == (seq, digest)
        store.append_audit(AuditEvent("operator.note", tenant="acme"), 1_700_000_002.0)
        assert store.audit_heads()["acme"][0] == seq + 1 and auditchain.verify(store).ok
    finally:
        store.close()
