"""What only the PostgreSQL store has: migrations, SKIP LOCKED due work, the database clock, LISTEN/NOTIFY
wake-ups, heartbeats, clear I/O errors; and runs end to end on it through the Runtime.

The store contract itself runs on PostgreSQL in ``test_store_suite.py`` (the ``store`` fixture).
Given / When / Then in each test; each test gets a fresh schema (``pg_schema``), dropped afterwards.
"""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from interp_helpers import S, make_plan, retry

from sealflow.core.clock import Clock, FakeClock
from sealflow.core.errors import StepError
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import MessageRefused, NewRun, SchemaTooNew, StoreError, open_store
from sealflow.store.postgres import LATEST, SchemaTooOld, StoreUnavailable, migrate
from sealflow.store.postgres.schema import MIGRATIONS

T0 = 1_700_000_000.0

#: the migration numbers, in order (they may skip)
VERSIONS = [number for number, _, _ in MIGRATIONS]


def new_run(run_id="r1", tenant="default"):
    return NewRun(id=run_id, tenant=tenant, workflow="wf", workflow_version=1, plan_digest="sha256:plan",
                  plan_json='{"plan": true}', input_json='{"n": 1}', input_hash='{"n": 1}', initiator="user:ana",
                  idempotency_key=None, deadline=None, first_step="a", first_lease_ms=30_000)


@pytest.fixture
def opened(pg_schema):
    stores = []

    def open_(**params):
        s = open_store(pg_schema.url(**{"clock": "caller", "migrate": "1", **params}))
        stores.append(s)
        return s

    yield open_
    for s in stores:
        s.close()


# -- migrations ----------------------------------------------------------------------------------------

def test_migrations_are_numbered_and_idempotent(pg_schema):
    # Given an empty schema / When it is migrated twice
    first = migrate(pg_schema.url())
    again = migrate(pg_schema.url())
    # Then every migration is applied once, in order, and the second run does nothing
    assert first == VERSIONS and again == []
    with pg_schema.connect() as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")] == first


def test_concurrent_migrations_apply_each_step_once(pg_schema):
    # Given four processes' worth of migrators started at once
    results, errors = [], []

    def go():
        try:
            results.append(migrate(pg_schema.url()))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then no one failed and each migration was applied by exactly one of them
    assert errors == []
    assert sorted(v for got in results for v in got) == VERSIONS


def test_an_older_schema_refuses_to_open_until_migrated(pg_schema):
    # Given a database at schema version 1
    migrate(pg_schema.url(), target=1)
    # When a store opens it without migrating / Then it says to run the migration
    with pytest.raises(SchemaTooOld, match=r"migrate it first: .*\?migrate=1"):
        open_store(pg_schema.url())
    # And once migrated it opens
    migrate(pg_schema.url())
    store = open_store(pg_schema.url())
    assert store.schema_version() == LATEST
    store.close()


def test_rate_limit_grants_of_an_older_schema_get_their_running_totals(pg_schema):
    # Given a schema at version 17 with grants of two models, one of them without its limit row
    migrate(pg_schema.url(), target=17)
    with pg_schema.connect() as conn:
        conn.execute("INSERT INTO rate_limits (model, updated_at) VALUES ('m', 5)")
        conn.cursor().executemany("INSERT INTO rate_grants (key, model, at, tokens) VALUES (%s, %s, %s, %s)",
                                  [("a", "m", 1, 100), ("b", "m", 5, 30), ("c", "orphan", 7, 9)])
    # When it is migrated to 18
    assert migrate(pg_schema.url(), target=18) == [18]
    # Then each model's totals are its grants' count and token sum
    with pg_schema.connect() as conn:
        got = conn.execute("SELECT model, requests, tokens, updated_at FROM rate_limits ORDER BY model").fetchall()
    assert [tuple(r) for r in got] == [("m", 2, 130, 5.0), ("orphan", 1, 9, 7.0)]


def test_an_older_schemas_attempts_gain_their_traceback_column(pg_schema):
    # Given a schema at version 19 with a failed attempt in it
    migrate(pg_schema.url(), target=19)
    with pg_schema.connect() as conn:
        conn.execute("INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, error_class, "
                     "error_message, seq) VALUES ('r1', 'a', 1, 1, 'failed', 7, 1000, 'internal', 'KeyError', 1)")
    # When it is migrated to 20
    assert migrate(pg_schema.url(), target=20) == [20]
    # Then the old attempt has no traceback, and the column takes one
    with pg_schema.connect() as conn:
        assert conn.execute("SELECT error_message, error_trace FROM attempts").fetchall() == [("KeyError", None)]
        conn.execute("UPDATE attempts SET error_trace = 'Traceback (most recent call last):'")


def test_a_newer_schema_refuses_to_open(pg_schema):
    # Given a database written by a newer sealflow
    migrate(pg_schema.url())
    with pg_schema.connect() as conn:
        conn.execute("INSERT INTO schema_version VALUES (%s, 'from the future', 0)", (LATEST + 1,))
    # When this sealflow opens it (even when asked to migrate) / Then it refuses, saying why
    for params in ({}, {"migrate": "1"}):
        with pytest.raises(SchemaTooNew, match=f"schema version {LATEST + 1}, newer than this sealflow"):
            open_store(pg_schema.url(**params))


# -- due work: SKIP LOCKED, concurrent claims ---------------------------------------------------------------

def test_outbox_rows_locked_by_another_transaction_are_skipped_not_waited_for(opened, pg_schema):
    # Given two runs with a message due, and another dispatcher's transaction holding r1's row
    store = opened()
    store.submit(new_run("r1"), T0)
    store.submit(new_run("r2"), T0 + 1)
    with pg_schema.connect() as other:
        other.execute("BEGIN")
        other.execute("SELECT * FROM outbox WHERE run_id = 'r1' FOR UPDATE")
        # When this store takes due messages
        started = time.monotonic()
        got = store.take_outbox(T0 + 5)
        # Then it gets r2's at once and leaves r1's to the transaction that holds it
        assert [m.run_id for m in got] == ["r2"] and time.monotonic() - started < 5
        other.execute("ROLLBACK")
    # And once that transaction is gone, r1's is taken
    assert [m.run_id for m in store.take_outbox(T0 + 5)] == ["r1"]


def test_two_connections_taking_due_work_never_both_get_it(opened):
    # Given 40 due messages and two stores (separate pools) dispatching at once
    a, b = opened(), opened()
    for i in range(40):
        a.submit(new_run(f"r{i:02}"), T0)
    taken: dict[str, list] = {"a": [], "b": []}

    def dispatch(name, store):
        for _ in range(20):
            taken[name].extend(store.take_outbox(T0 + 1, limit=3))

    threads = [threading.Thread(target=dispatch, args=item) for item in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every message went to exactly one of them
    every = taken["a"] + taken["b"]
    assert len(every) == 40 and len({m.run_id for m in every}) == 40


def test_two_workers_claiming_one_message_never_both_get_it(opened):
    # Given one message and two workers on two stores, claiming at the same moment, 10 times over
    a, b = opened(), opened()
    for i in range(10):
        a.submit(new_run(f"r{i}"), T0)
        (msg,) = a.take_outbox(T0)
        outcomes: list = []
        barrier = threading.Barrier(2)

        def claim(store, owner, barrier=barrier, outcomes=outcomes, msg=msg):
            barrier.wait()
            try:
                outcomes.append(store.claim(*msg, owner=owner, now=T0))
            except MessageRefused as exc:
                outcomes.append(exc.reason)

        threads = [threading.Thread(target=claim, args=(s, o)) for s, o in ((a, "w1"), (b, "w2"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Then exactly one holds the lease; the other was refused as stale
        claimed = [o for o in outcomes if not isinstance(o, str)]
        assert len(claimed) == 1 and [o for o in outcomes if isinstance(o, str)] == ["stale_token"]
        assert a.attempts(f"r{i}")[0].lease_owner == claimed[0].attempt.lease_owner


def test_concurrent_commits_of_one_tenant_keep_its_audit_chain_whole(opened):
    from sealflow.store import Commit, RunChange, StepChange, auditchain

    # Given four workers (each its own store and pool) running ten runs each of one tenant, all at once
    stores = [opened() for _ in range(4)]
    errors: list = []

    def work(n, store):
        try:
            for i in range(10):
                run_id = f"w{n}r{i}"
                store.submit(new_run(run_id, tenant="acme"), T0)
                msg = next(m for m in store.outbox(run_id))
                claimed = store.claim(run_id, msg.step_id, msg.attempt, msg.token, owner=f"w{n}", now=T0)
                att = claimed.attempt
                store.commit(Commit(run_id=run_id, expected_rev=claimed.run.rev,
                                    step=StepChange(att.step_id, att.attempt, att.token, "succeeded",
                                                    output_json="1"),
                                    run=RunChange(state="completed", add_steps=1)), T0)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n, s)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every run completed, and the tenant's chain has no gap, fork or broken link
    assert errors == []
    assert {r.state for r in stores[0].list_runs(limit=100)} == {"completed"}
    assert len(stores[0].list_runs(limit=100)) == 40
    report = auditchain.verify(stores[0])
    assert report.ok, report.breaks
    chain = stores[0].audit_chain("acme")
    assert [row[2] for row in chain] == list(range(1, len(chain) + 1))


# -- the database clock -----------------------------------------------------------------------------------

def test_leases_are_stamped_on_the_database_clock_whatever_the_callers_clock_says(opened):
    # Given a store on the database clock, and a caller whose clock is a day behind
    store = opened(clock="db")
    skewed = time.time() - 86_400
    store.submit(new_run(), skewed)
    (msg,) = store.take_outbox(skewed)
    # When it claims the step
    claimed = store.claim(*msg, owner="w1", now=skewed)
    # Then the lease runs 30 s from the database's now, not from the caller's
    db_now = store.db_now()
    assert abs(claimed.attempt.lease_expires - (db_now + 30)) < 5
    # And a sweep by that skewed caller does not expire it
    assert store.sweep(skewed + 31).leases_expired == 0


# -- wake-ups and heartbeats --------------------------------------------------------------------------------

def test_new_work_wakes_an_idle_worker_without_polling(opened):
    # Given a worker listening for work on one store
    worker, client = opened(), opened()
    assert worker.wait_for_work(0) is False  # starts listening
    assert worker.wait_for_work(0.05) is False  # nothing yet
    # When another process submits a run
    woke: list = []
    t = threading.Thread(target=lambda: woke.append(worker.wait_for_work(10)))
    t.start()
    time.sleep(0.1)
    started = time.monotonic()
    client.submit(new_run(), T0)
    t.join()
    # Then the worker wakes at once
    assert woke == [True] and time.monotonic() - started < 5
    assert [m.run_id for m in worker.take_outbox(T0)] == ["r1"]


def test_workers_heartbeat_in_the_store(opened):
    # Given two workers holding leases, one beating and one silent
    store = opened()
    for run_id in ("r1", "r2"):
        store.submit(new_run(run_id), T0)
    for msg, owner in zip(store.take_outbox(T0), ("alive", "silent"), strict=True):
        store.claim(*msg, owner=owner, now=T0)
    store.heartbeat("alive")
    # Then only the silent one is reported dead (by the database's clock, no host or pid involved)
    assert store.dead_workers(60) == ["silent"]
    store.heartbeat("silent")
    assert store.dead_workers(60) == []


# -- errors -------------------------------------------------------------------------------------------------

def test_an_unreachable_store_is_a_clear_error_naming_it_without_its_password():
    with pytest.raises(StoreUnavailable) as got:
        open_store("postgresql://ana:s3cret@127.0.0.1:1/nowhere")
    text = str(got.value)
    assert "postgresql://ana:***@127.0.0.1:1/nowhere" in text and "s3cret" not in text
    assert "bug" not in text and "Traceback" not in text


def test_a_database_that_does_not_exist_is_a_clear_error_saying_how_to_create_it(pg_schema):
    # Given a URL naming a database the server does not have, with a password
    url = "postgresql://postgres:s3cret@127.0.0.1:5432/sealflow_never_created"
    # When the store is opened
    with pytest.raises(StoreUnavailable) as got:
        open_store(url)
    # Then the error says so and how to create it (and the schema), never the password
    text = str(got.value)
    assert 'database "sealflow_never_created" does not exist' in text, text
    assert "create it first (createdb -h 127.0.0.1 -p 5432 -U postgres sealflow_never_created), then the schema " \
           "(sealflow store migrate)" in text
    assert "s3cret" not in text and "Traceback" not in text


@pytest.mark.parametrize("param, says", [
    ("pool_max=abc", "pool_max='abc'; use a whole number from 1 to 1000"),
    ("pool_max=0", "pool_max='0'; use a whole number from 1 to 1000"),
    ("pool_max=1001", "pool_max='1001'"),
    ("migrate=bogus", "migrate='bogus'; use migrate=1"),
    ("schema=x;drop", "schema='x;drop' is not a schema name"),
    ("schema=Mixed", "schema='Mixed' is not a schema name"),
])
def test_a_bad_value_of_sealflows_own_url_parameters_is_a_clear_error_before_connecting(param, says):
    # Given a store URL whose own parameter has a value sealflow does not take (the server does not exist:
    # the value is refused before anything connects)
    url = f"postgresql://ana:s3cret@127.0.0.1:1/nowhere?{param}"
    # When the store is opened, or migrated
    for call in (lambda: open_store(url), lambda: migrate(url)):
        with pytest.raises(StoreError) as got:
            call()
        # Then the error names the parameter and what it takes, never the password
        assert says in str(got.value) and "s3cret" not in str(got.value)
        assert not isinstance(got.value, StoreUnavailable)


def test_a_lost_connection_is_a_clear_error_and_nothing_half_done_is_kept(opened, pg_schema):
    # Given a run whose claim will find its connection killed by the server
    store = opened(pool_max="1")
    store.submit(new_run(), T0)
    (msg,) = store.take_outbox(T0)
    with pg_schema.connect() as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND pid <> pg_backend_pid() AND application_name = ''")
    # When the claim runs / Then it fails with a clear error (or, on a fresh connection, succeeds); never half
    try:
        store.claim(*msg, owner="w1", now=T0)
    except StoreUnavailable as exc:
        assert "PostgreSQL store" in str(exc) and "claim failed, nothing was changed" in str(exc)
        assert store.attempts("r1")[0].state == "scheduled"
    else:
        assert store.attempts("r1")[0].state == "running"


def test_a_pooled_connection_the_server_dropped_while_it_sat_idle_is_replaced_not_failed(opened, pg_schema):
    # Given a store whose one pooled connection sat unused for longer than the idle check's threshold, and
    # that the server has since dropped (a restart, an idle timeout, a proxy)
    from sealflow.store.postgres.pooling import CHECK_IDLE_AFTER_S

    name = f"sf-idle-{pg_schema.name}"  # this test's own: another session's on the same server is not touched
    store = opened(pool_max="1", application_name=name)
    store.submit(new_run(), T0)
    time.sleep(CHECK_IDLE_AFTER_S + 0.2)
    with pg_schema.connect() as admin:
        killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                               "datname = current_database() AND application_name = %s", (name,)).fetchone()[0]
    assert killed >= 1
    # When the next operation takes it from the pool
    (msg,) = store.take_outbox(T0)
    # Then the pool finds it dead and hands out a fresh one: the operation succeeds
    assert store.claim(*msg, owner="w1", now=T0).attempt.state == "running"


def test_many_rows_written_at_once_in_a_batch_pass_the_databases_limit_of_parameters(opened):
    # Given a write transaction (a batch member, its connection in pipeline mode) that inserts more rows at
    # once than one statement may carry parameters for (65,535: 5 a row here)
    store = opened()
    rows = [(f"sha256:{i:064d}", "wf", 1, "{}", T0) for i in range(14_000)]
    # When it inserts them together (as the audit chain writes a batch's events)
    with store._tx() as c:
        c.executemany("INSERT INTO plans (digest, workflow, version, body, created_at) VALUES (?,?,?,?,?)", rows)
    # Then every row is written, in more than one statement
    assert store._read("SELECT COUNT(*) FROM plans WHERE workflow = 'wf'")[0][0] == 14_000


AWKWARD = ['quote " and \\ backslash', "unicode: é 漢字 🙂", "{\"json\": [1, 2]}", "", "'; DROP TABLE audit; --",
           "line\nbreak\ttab", "null", "[]"]


def test_audit_events_written_together_read_back_exactly_as_they_were_hashed(opened):
    from sealflow.store import AuditEvent, auditchain

    # Given events whose text is awkward (quotes, backslashes, non-ASCII, JSON-looking, SQL-looking, empty)
    # and whose timestamps need every digit of a double, appended by concurrent writers so that batches hold
    # several of them (their rows go to the database as one JSON text)
    store = opened()
    stamps = [T0 + 0.1, T0 + 1 / 3, 1e-7, 123456789.98765433, T0]
    events = [(AuditEvent(f"probe.{i}", step_id=text, actor=f"user:{text}", detail={"text": text, "i": i},
                          tenant="acme", summary=text or None, error=text[::-1] or None),
               stamps[i % len(stamps)])
              for i, text in enumerate(AWKWARD * 4)]
    errors: list = []

    def write(part):
        try:
            for event, ts in part:
                store.append_audit(event, ts)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(events[n::4],)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # When they are read back
    got = {(r.event, r.ts): r for r in store.audit() if r.event.startswith("probe.")}
    # Then each is exactly as appended (text and timestamp to the last bit), and the chain over them verifies
    assert len(got) == len(events)
    for event, ts in events:
        row = got[(event.event, ts)]
        assert (row.step_id, row.actor, row.detail, row.summary, row.error) == (
            event.step_id, event.actor, event.detail, event.summary, event.error)
    report = auditchain.verify(store)
    assert report.ok, report.breaks


def test_a_constraint_the_database_enforces_is_a_clear_store_error(opened):
    from sealflow.store import StoreError

    # Given a run / When another run is submitted under the same id
    store = opened()
    store.submit(new_run("r1"), T0)
    with pytest.raises(StoreError, match=r"submit refused by the database, nothing was changed: UniqueViolation"):
        store.submit(new_run("r1"), T0)
    # Then the first run is as it was
    assert [r.id for r in store.list_runs()] == ["r1"] and len(store.audit("r1")) == 3


# -- end to end through the Runtime --------------------------------------------------------------------------

@pytest.fixture
def pg_runtime(pg_schema):
    made = []

    def make(registry, *, clock=None, store_clock="caller"):
        rt = Runtime(open_store(pg_schema.url(clock=store_clock, migrate="1"), clock=clock or FakeClock()), registry,
                     {}, rng=random.Random(7), worker_timeout_ms=20)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()
        rt.store.close()


def test_a_run_with_a_retry_completes_on_postgres_and_its_audit_chain_verifies(pg_runtime):
    from sealflow.store import auditchain

    # Given an action that fails once, then succeeds, on a runtime with a PostgreSQL store
    registry, calls = Registry(), []

    @action("t.flaky", registry=registry)
    def flaky(ctx, n):
        calls.append(n)
        if len(calls) == 1:
            raise StepError("network", "try again")
        return {"n": n + 1}

    rt = pg_runtime(registry)
    plan = make_plan(S("f", "action", action="t.flaky", args={"n": "${{ input.n }}"}, retry=retry("network")),
                     S("g", "set", assign={"double": "steps.f.output.n * 2"}),
                     output="${{ steps.g.output.double }}")
    # When it runs to the end
    status = rt.run(plan, {"n": 1}, initiator="user:ana")
    # Then it completed after one retry, and the audit chain holds
    assert status.state == "completed" and status.output == 4 and calls == [1, 1]
    assert auditchain.verify(rt.store).ok


def test_a_run_on_the_database_clock_completes(pg_runtime):
    registry = Registry()

    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        return kw

    rt = pg_runtime(registry, clock=Clock(), store_clock="db")
    status = rt.run(make_plan(S("a", "action", action="t.echo", args={"x": 1}), output="${{ steps.a.output.x }}"),
                    {}, initiator="user:ana")
    assert status.state == "completed" and status.output == 1
    assert json.loads(json.dumps(status.step_states())) == {"a": "succeeded"}


def test_migrate_store_and_open_store_with_migrate_bring_a_database_up_to_date(pg_schema):
    from sealflow.store import migrate_store

    # Given an empty database / When a worker opens it asking to migrate
    store = open_store(pg_schema.url(), migrate=True)
    # Then it is at the latest schema, and `sealflow store migrate` afterwards has nothing to do
    assert store.schema_version() == LATEST
    store.close()
    assert migrate_store(pg_schema.url()) == (LATEST, [])


def test_the_cli_runs_a_definition_on_a_postgresql_store(pg_schema, capsys):
    from pathlib import Path

    from sealflow.cli import main

    # Given a migrated PostgreSQL database / When `sealflow run` is pointed at it with --store
    migrate(pg_schema.url())
    example = Path(__file__).resolve().parents[3] / "definitions" / "lead-qualification.v1.yaml"
    code = main(["run", str(example), "--input", '{"lead_id": "lead_midco"}', "--store", pg_schema.url()])
    out = capsys.readouterr().out
    # Then the run completes there, and its audit chain verifies
    assert code == 0 and "state: completed" in out
    assert main(["audit", "verify", "--store", pg_schema.url()]) == 0


@pytest.mark.parametrize("url", [
    "postgresql://postgres@127.0.0.1:1/sealflow?password=S3CRETPW",  # libpq takes the password as a parameter too
    "postgresql://postgres@127.0.0.1:1/sealflow?sslpassword=S3CRETPW&connect_timeout=2",
    "postgresql://postgres:S3CRETPW@127.0.0.1:1/sealflow",
])
def test_a_store_that_cannot_be_opened_never_shows_its_password(url):
    # Given a store URL with a password, in the user part or as a libpq parameter, naming no server
    # When it is opened / Then the error names the store, masked
    with pytest.raises(StoreUnavailable) as err:
        open_store(url)
    assert "S3CRETPW" not in str(err.value) and "***" in str(err.value) and "127.0.0.1:1" in str(err.value)


@pytest.mark.parametrize("url", ["postgresql://postgres:S3CRETPW@[::1/sealflow", "postgresql://u:S3CRETPW@[x/db"])
def test_a_store_url_a_parser_chokes_on_is_a_store_error(url):
    # Given a store URL with an unclosed IPv6 bracket / When opened / Then a StoreError says so, not a ValueError
    with pytest.raises(StoreError) as err:
        open_store(url)
    assert "not a PostgreSQL URL" in str(err.value) and "S3CRETPW" not in str(err.value)


def test_given_nothing_due_when_a_worker_sweeps_then_it_does_not_queue_for_the_writers_lock(opened, pg_schema):
    # Given a store with a claimed attempt (its lease runs 30 s), and another session holding the writers' lock
    # (a long write of another process)
    from test_store_suite import submit_and_claim

    from sealflow.store.postgres.batching import WRITERS_LOCK, WRITERS_UNLOCK

    s = opened()
    submit_and_claim(s, now=T0)
    early: list = []
    swept: list = []
    with pg_schema.connect() as other:
        other.execute(WRITERS_LOCK)
        try:
            # When it sweeps while nothing is due, then it answers at once (a read told it), and dispatching too
            now = threading.Thread(target=lambda: early.append((s.sweep(T0 + 1), s.take_outbox(T0 + 1))),
                                   daemon=True)
            now.start()
            now.join(5)
            assert [(r.leases_expired, sent) for r, sent in early] == [(0, [])], "it waited for the writers' lock"
            # And once the lease has expired, the sweep queues for the lock and does its work when it is free
            late = threading.Thread(target=lambda: swept.append(s.sweep(T0 + 31)), daemon=True)
            late.start()
            late.join(0.5)
            assert late.is_alive() and swept == []
        finally:
            other.execute(WRITERS_UNLOCK)
    now.join(10)
    late.join(10)
    assert [r.leases_expired for r in swept] == [1]


def test_every_operation_of_the_store_api_turns_database_errors_into_clear_ones():
    """Each public operation of the Store interface is wrapped (``_io``): a lost connection is a
    StoreUnavailable naming the store and the cause, never psycopg's own exception (which a worker's loop
    logged as a traceback: take_due, added later, was missing from the list)."""
    import inspect

    from sealflow.store.base import Store
    from sealflow.store.postgres.store import PostgresStore

    # Given the Store interface's public operations (those that need no database are left out)
    public = {n for n, _ in inspect.getmembers(Store, inspect.isfunction) if not n.startswith("_")}
    public -= {"close", "schema_version"}
    # Then each of PostgresStore's is the wrapped one
    unwrapped = sorted(n for n in public if getattr(getattr(PostgresStore, n), "__wrapped__", None) is None)
    assert unwrapped == []


def test_an_operation_waits_a_bounded_time_for_a_connection(opened):
    """With the database unreachable, a worker's loop notices a stop only between operations: each waits at
    most POOL_WAIT_S for a connection (psycopg_pool's default would be 30 s, a supervisor's whole grace)."""
    from sealflow.store.postgres.pooling import POOL_WAIT_S

    assert opened()._pool.timeout == POOL_WAIT_S <= 10
