"""The statements both SQL backends share (store/sql/), run as written on each: no statement is rewritten for
PostgreSQL, only its parameter markers rendered in psycopg's style (store/postgres/dialect.py).

Given / When / Then in each test; the ``store`` fixture is each backend in turn.
"""

from __future__ import annotations

from test_store_suite import T0, new_run

from sealflow.store import AuditEvent
from sealflow.store.postgres.dialect import _one_row, markers
from sealflow.store.sql.statements import OUTBOX_PUT, PLAN_PUT, tenant_args, tenant_is


def test_markers_render_qmarks_as_psycopg_parameters_and_keep_a_literal_percent():
    # Given a statement with qmark parameters and a literal percent sign
    sql = "SELECT a FROM t WHERE b LIKE '10%' AND c = ? AND d IS NULL AND e = ?"
    # When it is rendered for psycopg
    got = markers(sql)
    # Then each ? is a %s and the literal % is doubled (psycopg reads a lone % as a marker), nothing else moved
    assert got == "SELECT a FROM t WHERE b LIKE '10%%' AND c = %s AND d IS NULL AND e = %s"


def test_only_an_insert_of_one_row_of_parameters_is_sent_as_one_multi_row_statement():
    # Given an insert of one row of parameters, one with a literal among its values, and an update
    one = "INSERT INTO t (a, b) VALUES (?, ?)"
    literal = "INSERT INTO t (a, b) VALUES (?, 0)"
    update = "UPDATE t SET a = ? WHERE b = ?"
    # When each is looked at for the multi-row form
    # Then only the first is split into its head and its row (which a batch repeats)
    assert _one_row(one) == ("INSERT INTO t (a, b) VALUES ", "(?, ?)")
    assert _one_row(literal) is None
    assert _one_row(update) is None


def test_the_outbox_upsert_moves_a_sent_row_back_to_unsent_on_every_backend(store):
    # Given a submitted run, its first outbox row marked sent
    store.submit(new_run("r1"), T0)
    with store._tx() as c:
        key = c.execute("SELECT run_id, step_id, attempt, token FROM outbox WHERE run_id = ?", ("r1",)).fetchone()
        c.execute("UPDATE outbox SET sent_at = ? WHERE run_id = ?", (T0, "r1"))
    # When the shared upsert writes the same row again, due later and unsent
    with store._tx() as c:
        c.execute(OUTBOX_PUT, (*key, T0 + 5.0, None))
    # Then there is still one row, moved, and unsent (as SQLite's INSERT OR REPLACE left it)
    got = store._read("SELECT due_at, sent_at FROM outbox WHERE run_id = ?", ("r1",))
    assert [tuple(r) for r in got] == [(T0 + 5.0, None)]


def test_a_plan_stored_twice_keeps_its_first_body_on_every_backend(store):
    # Given a plan stored once
    with store._tx() as c:
        c.execute(PLAN_PUT, ("d1", "wf", 1, '{"first": true}', T0))
    # When the same digest is stored again with another body
    with store._tx() as c:
        c.execute(PLAN_PUT, ("d1", "wf", 1, '{"second": true}', T0 + 1))
    # Then nothing was refused and the first body is kept
    assert store._read("SELECT body FROM plans WHERE digest = ?", ("d1",)) == [('{"first": true}',)]


def test_the_tenant_condition_finds_the_rows_of_a_tenant_or_of_none(store):
    # Given audit events of a tenant's run, of the system chain, and one that names no tenant (as events
    # written before the chain did)
    store.submit(new_run("r1", tenant="acme"), T0)
    store.append_audit(AuditEvent("probe", actor="test"), T0)
    with store._tx() as c:
        c.execute("INSERT INTO audit (event, actor, ts) VALUES (?, ?, ?)", ("legacy", "test", T0))
    # When each is looked up by its tenant condition
    def events(tenant):
        return [r[0] for r in store._read(f"SELECT event FROM audit WHERE {tenant_is(tenant)} ORDER BY id",
                                          tenant_args(tenant))]
    # Then each finds its own and only its own, and the audit reads built on it agree
    assert events("acme") == ["run.created", "run.queued", "step.scheduled"]
    assert events("") == ["probe"]
    assert events(None) == ["legacy"]
    assert len(store.audit_chain(None)) == 1 and len(store.audit_chain("acme")) == 3
    head, chain = store.audit_snapshot(None)
    assert head is None and len(chain) == 1
