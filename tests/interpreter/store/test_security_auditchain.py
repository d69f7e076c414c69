"""The audit chain: hash-chained per tenant; `audit verify` finds edited, deleted, inserted and reordered events."""

from __future__ import annotations

import json
import sqlite3

import pytest
from interp_helpers import S, make_plan

from sealflow.cli import main
from sealflow.execution.actions import action
from sealflow.store import auditchain, open_store
from sealflow.store.sqlite.schema import migrate


@pytest.fixture
def chained(runtime, registry):
    """Given two tenants' runs on one store (their events interleave in the audit table)."""

    @action("t.work", registry=registry)
    def work(ctx, n):
        return {"n": n}

    plan = make_plan(S("a", "action", action="t.work", args={"n": 1}), S("b", "action", action="t.work",
                                                                          args={"n": 2}))
    runs = [runtime.run(plan, {}, initiator="user:ana", tenant=t).run.id for t in ("acme", "globex", "acme")]
    return runtime, runs


def db(runtime) -> sqlite3.Connection:
    """The store's SQLite file opened directly, the audit log's guard triggers dropped (an attacker's view)."""
    conn = sqlite3.connect(runtime.store.path, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
    conn.execute("DROP TRIGGER IF EXISTS audit_no_delete")
    return conn


def ids(conn, tenant):
    return [r[0] for r in conn.execute("SELECT id FROM audit WHERE tenant = ? ORDER BY id", (tenant,))]


def test_an_untouched_store_verifies_and_each_tenant_has_its_own_chain(chained):
    # Given runs of two tenants
    runtime, runs = chained
    # When the chains are verified
    report = auditchain.verify(runtime.store)
    # Then they are intact, one chain per tenant, numbered from 1 and linked event to event
    assert report.ok and set(report.events) == {"acme", "globex"}
    acme = runtime.audit(runs[0])
    assert acme[0].seq == 1 and acme[0].prev_hash == "" and acme[1].prev_hash == acme[0].hash
    assert {e.tenant for e in runtime.audit(runs[1])} == {"globex"}
    assert auditchain.verify(runtime.store, "globex").events == {"globex": len(runtime.audit(runs[1]))}


def test_events_carry_the_run_context_and_no_outputs(chained):
    runtime, runs = chained
    events = runtime.audit(runs[0])
    done = next(e for e in events if e.event == "step.succeeded")
    # Then each event names workflow, version, plan digest, tenant and the tool; the output is a size and hash
    assert (done.workflow, done.workflow_version, done.tenant, done.tool) == ("test-flow", 1, "acme", "t.work")
    assert done.plan_digest.startswith("sha256:") and done.summary.startswith("7B sha256:")
    assert '"n"' not in (done.summary or "") and done.detail is None


def test_an_edited_event_is_named(chained):
    runtime, runs = chained
    conn = db(runtime)
    victim = ids(conn, "acme")[5]
    # When an event's content is changed in the file
    conn.execute("UPDATE audit SET actor = 'user:mallory' WHERE id = ?", (victim,))
    # Then verify names exactly that event as edited
    first = auditchain.verify(runtime.store).first
    assert (first.tenant, first.event_id, first.problem) == ("acme", victim, "edited")


def test_a_deleted_event_is_found_at_the_gap(chained):
    runtime, runs = chained
    conn = db(runtime)
    acme = ids(conn, "acme")
    conn.execute("DELETE FROM audit WHERE id = ?", (acme[3],))
    first = auditchain.verify(runtime.store, "acme").first
    assert (first.event_id, first.problem) == (acme[4], "deleted") and "seq 4" in first.message


def test_deleting_the_last_events_is_found_against_the_head(chained):
    runtime, runs = chained
    conn = db(runtime)
    acme = ids(conn, "acme")
    conn.execute("DELETE FROM audit WHERE id >= ?", (acme[-2],))
    first = auditchain.verify(runtime.store, "acme").first
    assert first.problem == "truncated" and "2 event(s) were deleted" in first.message


def test_an_inserted_event_is_found(chained):
    runtime, runs = chained
    conn = db(runtime)
    acme = ids(conn, "acme")
    # When a forged event is slipped in, copying a real one's chain fields
    cols = "run_id, step_id, event, actor, state_before, state_after, detail, ts, tenant, workflow, " \
           "workflow_version, plan_digest, decision, tool, summary, error, seq, prev_hash, hash"
    conn.execute(f"INSERT INTO audit ({cols}) SELECT run_id, step_id, 'approval.granted', 'user:mallory', "
                 f"state_before, state_after, detail, ts, tenant, workflow, workflow_version, plan_digest, 'allow', "
                 f"tool, summary, error, seq, prev_hash, hash FROM audit WHERE id = ?", (acme[-1],))
    # Then verify stops at it (its content does not match the hash it copied)
    first = auditchain.verify(runtime.store, "acme").first
    assert first.problem == "edited" and first.event_id > acme[-1]


def test_an_inserted_event_with_a_recomputed_hash_is_named(chained):
    runtime, runs = chained
    conn = db(runtime)
    acme = ids(conn, "acme")
    real = conn.execute(f"SELECT {auditchain.VERIFY_COLS} FROM audit WHERE id = ?", (acme[2],)).fetchone()
    # When a forger makes room before event 3 and slips in a copy with other content and a recomputed hash
    forged = list(real)
    forged[12] = "user:mallory"
    forged[4] = auditchain.row_hash(tuple(forged))
    conn.execute("UPDATE audit SET id = id + 100000 WHERE tenant = 'acme' AND id >= ?", (acme[2],))
    cols = auditchain.VERIFY_COLS
    conn.execute(f"INSERT INTO audit ({cols}) VALUES ({','.join('?' * len(forged))})", forged)
    # Then verify names the forgery, not the genuine event after it
    first = auditchain.verify(runtime.store, "acme").first
    assert (first.event_id, first.problem) == (acme[2], "inserted")


def test_reordered_events_are_found(chained):
    runtime, runs = chained
    conn = db(runtime)
    acme = ids(conn, "acme")
    a, b = acme[4], acme[6]
    # When two events swap places (their ids)
    conn.execute("UPDATE audit SET id = -1 WHERE id = ?", (a,))
    conn.execute("UPDATE audit SET id = ? WHERE id = ?", (a, b))
    conn.execute("UPDATE audit SET id = ? WHERE id = -1", (b,))
    # Then the first out-of-place event is named
    first = auditchain.verify(runtime.store, "acme").first
    assert first.event_id == a and first.problem == "reordered"


def test_an_event_added_without_a_chain_is_found(chained):
    runtime, runs = chained
    conn = db(runtime)
    conn.execute("INSERT INTO audit (run_id, event, actor, ts) VALUES (?, 'run.completed', 'system', 0)", (runs[0],))
    report = auditchain.verify(runtime.store)
    assert not report.ok and report.first.problem == "unchained"


def test_the_chain_is_computed_in_the_appending_transaction_across_store_objects(tmp_path, registry):
    # Given two store objects (two processes) appending to the same file
    one, two = (open_store(f"sqlite:///{tmp_path}/s.db") for _ in range(2))
    try:
        from sealflow.store.base import AuditEvent

        for i in range(6):
            (one if i % 2 else two).append_audit(AuditEvent("note", None, "user:ana", tenant="acme",
                                                            detail={"i": i}), float(i))
        # Then the events form one unbroken chain
        report = auditchain.verify(one)
        assert report.ok and report.events == {"acme": 6}
    finally:
        one.close()
        two.close()


def test_the_migration_chains_events_written_before_it(tmp_path):
    # Given a database at the schema before the chain, with audit events
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, target=3)
    body = json.dumps({"steps": [{"id": "a", "action": "x.y"}]})
    conn.execute("INSERT INTO plans VALUES ('sha256:p', 'w', 1, ?, 0)", (body,))
    conn.execute("INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, initiator, "
                 "input_hash, created_at, updated_at) VALUES ('r1', 'acme', 'w', 1, 'sha256:p', '{}', 'completed', 3, "
                 "'user:ana', 'h', 0, 0)")
    for i, event in enumerate(("run.created", "step.succeeded", "run.completed")):
        conn.execute("INSERT INTO audit (run_id, step_id, event, actor, ts) VALUES ('r1', ?, ?, 'system', ?)",
                     ("a" if "step" in event else None, event, float(i)))
    conn.execute("INSERT INTO audit (run_id, event, actor, detail, ts) VALUES (NULL, 'submit_denied', 'user:eve', "
                 "?, 3)", (json.dumps({"tenant": "globex"}),))
    conn.close()
    # When it is opened by this version
    store = open_store(f"sqlite:///{path}")
    try:
        # Then the old events are chained (per tenant, in order) and the chain verifies
        events = store.audit()
        assert [(e.tenant, e.seq) for e in events] == [("acme", 1), ("acme", 2), ("acme", 3), ("globex", 1)]
        assert events[1].tool == "x.y" and events[3].decision == "deny"
        assert auditchain.verify(store).ok
        # and the audit log is append-only again
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store._conn.execute("UPDATE audit SET actor = 'x'")
    finally:
        store.close()


# -- the command line -------------------------------------------------------------------------------

def test_cli_audit_verify_exits_0_when_intact_and_1_naming_the_first_bad_event(chained, capsys):
    runtime, runs = chained
    url = f"sqlite:///{runtime.store.path}"
    # When verified intact
    assert main(["audit", "verify", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "ok      tenant acme" in out and "ok      tenant globex" in out
    # When an event is edited in the file
    conn = db(runtime)
    victim = ids(conn, "globex")[2]
    conn.execute("UPDATE audit SET state_after = 'completed' WHERE id = ?", (victim,))
    # Then verify exits 1 and names it
    assert main(["audit", "verify", "--store", url]) == 1
    captured = capsys.readouterr()
    assert f"event {victim} " in captured.err and "was edited" in captured.err
    # and --tenant limits the walk to one chain
    assert main(["audit", "verify", "--store", url, "--tenant", "acme"]) == 0
    assert "globex" not in capsys.readouterr().out
    assert main(["audit", "verify", "--store", url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_break"]["event_id"] == victim and report["first_break"]["problem"] == "edited"


def test_cli_audit_run_still_prints_a_runs_trail(chained, capsys):
    runtime, runs = chained
    url = f"sqlite:///{runtime.store.path}"
    assert main(["audit", runs[1], "--store", url, "--tenant", "globex", "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert events[0]["event"] == "run.created" and events[-1]["hash"]
    assert main(["audit", "show", runs[1], "--store", url, "--tenant", "globex"]) == 0
    assert "run.completed" in capsys.readouterr().out


def test_a_chain_verified_while_workers_append_to_it_is_whole_on_every_store(store):
    import threading

    from sealflow.store import AuditEvent, auditanchor

    # Given a store whose tenant chain other writers keep appending to (as live workers do), from their
    # own store objects (another process's view of the same store)
    writers = [open_store(store.url) for _ in range(2)]
    stop, errors = threading.Event(), []

    def append(s, n):
        try:
            i = 0
            while not stop.is_set():
                s.append_audit(AuditEvent(f"probe.{n}.{i}", actor="system", tenant="acme"), 1_700_000_000.0 + i)
                i += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(s, n)) for n, s in enumerate(writers)]
    for t in threads:
        t.start()
    try:
        import time

        deadline = time.monotonic() + 30
        while len(store.audit_chain("acme")) < 20 and time.monotonic() < deadline and not errors:
            time.sleep(0.01)
        # When the chain is verified and anchored again and again meanwhile
        reports = []
        for _ in range(25):
            reports.append(auditchain.verify(store, "acme"))
            auditanchor.take(store, 1_700_000_000.0, "acme")  # raises on a break
    finally:
        stop.set()
        for t in threads:
            t.join()
        for s in writers:
            s.close()
    # Then every verification finds it whole (its head and events read at one moment), none "cut"
    assert errors == []
    assert [r.breaks for r in reports if not r.ok] == []
    assert reports[-1].events["acme"] > reports[0].events["acme"] >= 20  # (they did append meanwhile)
