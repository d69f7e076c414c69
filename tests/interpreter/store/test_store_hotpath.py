"""The PostgreSQL store's hot path (store/postgres/hot*.py): a run's submit, first claim, carried steps and end,
each one statement batched and done in the database, written exactly as the shared code writes them, refused as
it refuses them, and falling back to it for everything else.

Given / When / Then in each test; each test gets a fresh schema (``pg_schema``), dropped afterwards.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time

import pytest
from interp_helpers import S, make_plan
from test_store_suite import T0, new_run

from sealflow.core.clock import FakeClock
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.store import (
    Commit,
    ConcurrencyError,
    FencingError,
    MessageRefused,
    NextAttempt,
    RunChange,
    StepChange,
    auditchain,
    open_store,
)
from sealflow.store.postgres import hot, hotitems
from sealflow.store.postgres.batching import WRITERS_LOCK, WRITERS_UNLOCK
from sealflow.store.postgres.chainlink import CALL as LINK


@pytest.fixture
def pg(pg_schema):
    store = open_store(pg_schema.url(clock="caller", migrate="1", pool_max="4"), clock=FakeClock(T0))
    yield store
    store.close()


@pytest.fixture
def sent(monkeypatch):
    """What the hot path sent, by kind and outcome (``ok``, or the exception it ended with)."""
    seen: collections.Counter = collections.Counter()
    call = hot.HotQueue._call

    def counting(self, batch):
        call(self, batch)
        for entry in batch:
            seen[(entry.item["k"], "ok" if entry.error is None else type(entry.error).__name__)] += 1

    monkeypatch.setattr(hot.HotQueue, "_call", counting)
    return seen


def shared_only(monkeypatch):
    """From now on every hot item is sent the shared way (as if the database answered ``general``)."""
    def general(self, batch):
        for entry in batch:
            entry.error = hot.GoGeneral("the shared way, for comparison")

    monkeypatch.setattr(hot.HotQueue, "_call", general)


def runtime_on(store) -> Runtime:
    registry = Registry()

    @action("t.a", registry=registry)
    def a(ctx, n=0):
        return {"n": n + 1, "text": "é \"quoted\" \\ back\nslash"}

    return Runtime(store, registry)  # on the store's clock


def three_steps():
    return make_plan(S("a", "action", action="t.a", args={"n": 1}),
                     S("b", "action", action="t.a", args={"n": "${{ steps.a.output.n }}"}),
                     S("c", "action", action="t.a"), output={"last": "${{ steps.c.output }}"})


def written(store, run_id: str) -> dict:
    """Everything a run wrote, without what differs from run to run (ids, tokens, times, the worker's name)."""
    raw = store._pool.getconn()
    try:
        run = raw.execute("SELECT state, rev, input, output, error_class, steps_executed, tokens, cost_usd, "
                          "tool_calls, cursor_step, cursor_attempt, priority FROM runs WHERE id = %s",
                          (run_id,)).fetchone()
        attempts = raw.execute("SELECT step_id, attempt, try_no, state, lease_ms, output, error_class, data, seq, "
                               "leases_lost, lease_owner IS NULL, ended_at IS NULL FROM attempts WHERE run_id = %s "
                               "ORDER BY seq, step_id, attempt", (run_id,)).fetchall()
        results = raw.execute("SELECT step_id, status, output FROM results WHERE run_id = %s ORDER BY step_id",
                              (run_id,)).fetchall()
        audit = raw.execute("SELECT step_id, event, actor, state_before, state_after, detail, decision, tool, "
                            "summary, error, chain_v FROM audit WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()
        left = raw.execute("SELECT (SELECT count(*) FROM outbox WHERE run_id = %s), (SELECT count(*) FROM timers "
                           "WHERE run_id = %s)", (run_id, run_id)).fetchone()
    finally:
        store._pool.putconn(raw)

    def anon(text):
        return None if text is None else text.replace(run_id, "RUN")

    return {"run": tuple(run), "attempts": [tuple(a) for a in attempts], "results": [tuple(r) for r in results],
            "audit": [tuple(anon(v) if isinstance(v, str) else v for v in e) for e in audit], "left": tuple(left)}


def test_a_run_on_the_hot_path_writes_what_the_shared_code_writes(pg, sent, monkeypatch):
    # Given a runtime on PostgreSQL and a three-step workflow whose outputs hold awkward text
    rt = runtime_on(pg)
    plan = three_steps()
    try:
        # When one run, submitted and dispatched, goes the hot path (submit, first claim, two carried steps,
        # the end)
        hot_run = rt.drive(rt.submit(plan, {"x": "ünïcode"}, initiator="user:ana"))
        # Then it went that way entirely
        assert sent == {("submit", "ok"): 1, ("claim", "ok"): 1, ("carry", "ok"): 2, ("end", "ok"): 1}
        # And when another run of the same goes the shared way
        shared_only(monkeypatch)
        shared_run = rt.drive(rt.submit(plan, {"x": "ünïcode"}, initiator="user:ana"))
    finally:
        rt.close()
    # Then both completed and wrote the same rows and the same audit events, row for row
    assert hot_run.state == shared_run.state == "completed"
    assert written(pg, hot_run.run.id) == written(pg, shared_run.run.id)
    # and the tenant's chain verifies across both (every event in format 2)
    report = auditchain.verify(pg)
    assert report.ok, report.breaks
    assert {e[-1] for e in pg.audit_chain("default")} == {2}


def test_the_database_links_events_as_verify_recomputes_them_and_an_edit_breaks_the_chain(pg):
    # Given events of two tenants with awkward contents, linked by the database in one call
    chain = pg._chain.chain
    pending = [(None, None, "t.event", "user:ana", None, None,
                json.dumps({"tenant": tenant, "text": text, "n": n}), T0 + n / 7, {"tenant": tenant})
               for n, (tenant, text) in enumerate([("acme", "é\n\"q\"\\"), ("beta", "\u2028 \x01"), ("acme", "𝄞"),
                                                   ("beta", ""), ("acme", "1e-05")])]
    raw = pg._pool.getconn()
    try:
        raw.execute(LINK, (json.dumps(chain.bodies(None, pending)),))
        # Then each tenant's chain verifies (hashes recomputed in Python), seq 1, 2, 3 and 1, 2
        report = auditchain.verify(pg)
        assert report.ok and report.events == {"acme": 3, "beta": 2}
        # And when one event's content is edited (the guard trigger dropped, as an attacker would)
        raw.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
        raw.execute("UPDATE audit SET actor = 'user:mallory' WHERE tenant = 'acme' AND seq = 2")
    finally:
        pg._pool.putconn(raw)
    # Then verify names it
    first = auditchain.verify(pg, "acme").first
    assert (first.seq, first.problem) == (2, "edited")


def carried(pg, run_id: str = "r1"):
    """Run ``run_id``'s first step claimed (hot), and a commit of it that carries on to step b."""
    pg.submit(new_run(run_id), T0)
    (msg,) = pg.take_outbox(T0)
    claimed = pg.claim(*msg, owner="w1", now=T0, slotless=True)
    att = claimed.attempt
    commit = Commit(run_id=run_id, expected_rev=claimed.run.rev,
                    step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json='{"ok":true}'),
                    run=RunChange(add_steps=1), next=NextAttempt("b", 1, "scheduled", T0, 30_000),
                    dispatch_inline=True, claim_as="w1", carry_from=claimed.run, holds_slots=False,
                    seen=(claimed.run.state, claimed.run.tenant, None, att.state))
    return claimed, commit


def test_a_stale_carry_is_refused_as_the_shared_code_refuses_it_and_writes_nothing(pg, sent):
    # Given a claimed step and two commits of it: one with a token that moved on, one at a stale revision
    claimed, commit = carried(pg)
    before = written(pg, "r1")
    stale_token = dataclasses.replace(commit, step=dataclasses.replace(commit.step, token=commit.step.token + 1))
    stale_rev = dataclasses.replace(commit, expected_rev=commit.expected_rev - 1)
    # When they are committed, Then each is refused as the shared code refuses it, and nothing is written
    with pytest.raises(FencingError):
        pg.commit(stale_token, T0 + 1)
    with pytest.raises(ConcurrencyError):
        pg.commit(stale_rev, T0 + 1)
    assert written(pg, "r1") == before
    # And the genuine commit then carries on
    done = pg.commit(commit, T0 + 1)
    assert done.claimed.attempt.step_id == "b" and done.claimed.attempt.state == "running"
    assert sent[("carry", "ok")] == 1 and auditchain.verify(pg).ok


def test_a_failing_item_does_not_break_its_batch_and_its_change_goes_the_shared_way(pg, sent):
    # Given a plan this process believes stored but the database has not (as after a prune removed it)
    pg._plans_known.add("sha256:plan")
    # When two runs are submitted at once, one of them the first run of that plan
    queue = pg._hot
    results = {}
    items = []
    for run_id in ("r1", "r2"):
        new = new_run(run_id)
        chain = pg._chain.chain
        chain.remember_run(new.id, new.tenant, new.workflow, new.workflow_version, new.plan_digest)
        chain.remember_plan(new.plan_digest, new.plan_json)
        items.append(hotitems.submit_item(new, T0, 7, run_id == "r1",
                                          chain.bodies(None, hotitems.submit_events(new, T0))))
    entries = [hot._Entry(item, lambda answer: answer) for item in items]
    queue._call(entries)
    for entry, run_id in zip(entries, ("r1", "r2"), strict=True):
        results[run_id] = entry.error or entry.result
    # Then the one without its plan failed alone (its reference), and the other was written
    assert isinstance(results["r1"], hot.HotFailed) and "foreign key" in str(results["r1"])
    assert results["r2"] == {"s": "ok"} and pg.get_run("r2").state == "queued"
    # And through the store, that submit falls back to the shared way (which stores the plan) and succeeds
    pg._plans_known.add("sha256:other")
    run, created = pg.submit(dataclasses.replace(new_run("r3"), plan_digest="sha256:other"), T0)
    assert created and pg.get_run("r3").plan_digest == "sha256:other"
    assert sent == {("submit", "ok"): 1, ("submit", "HotFailed"): 2} and auditchain.verify(pg).ok


def test_a_hot_batch_waits_for_the_writers_lock(pg, pg_schema):
    # Given another writer holding the writers' lock (every writer of the deployment takes it)
    other = pg_schema.connect()
    other.execute(WRITERS_LOCK)
    done = threading.Event()

    def submit():
        pg.submit(new_run("r1"), T0)
        done.set()

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        # When a hot submit is sent, Then it does not write while the lock is held
        assert not done.wait(1.0)
        assert other.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    finally:
        # And once the lock is let go, it does
        other.execute(WRITERS_UNLOCK)
        other.close()
    thread.join(10)
    assert done.is_set() and pg.get_run("r1").state == "queued"


def test_a_hot_claim_takes_what_the_shared_claim_takes_and_a_stale_one_is_refused_and_audited(pg, sent):
    # Given two queued runs, their messages taken
    pg.submit(new_run("r1"), T0)
    pg.submit(new_run("r2"), T0)
    msgs = {m.run_id: m for m in pg.take_outbox(T0)}
    # When one is claimed hot and the other the shared way
    hot_claim = pg.claim(*msgs["r1"], owner="w1", now=T0 + 1, slotless=True)
    shared_claim = pg.claim(*msgs["r2"], owner="w1", now=T0 + 1)
    # Then both claims are the same but for the run's id, input and token
    assert sent[("claim", "ok")] == 1
    assert dataclasses.replace(hot_claim.attempt, run_id="r2", token=0) == dataclasses.replace(
        shared_claim.attempt, token=0)
    assert dataclasses.replace(hot_claim.run, id="r2") == shared_claim.run
    assert written(pg, "r1") == written(pg, "r2")
    # And a duplicate of the message (now stale) goes the shared way, which refuses it and audits why
    with pytest.raises(MessageRefused):
        pg.claim(*msgs["r1"], owner="w2", now=T0 + 2, slotless=True)
    assert sent[("claim", "GoGeneral")] == 1
    assert [e.detail["reason"] for e in pg.audit("r1") if e.event == "message_refused"] == ["stale_token"]


def test_a_run_ending_with_a_slot_held_goes_the_shared_way_which_gives_the_slot_back(pg, sent):
    # Given a run at its last step that holds a pool slot (as a run-level concurrency slot is held)
    claimed, commit = carried(pg)
    raw = pg._pool.getconn()
    try:
        raw.execute("INSERT INTO slot_names (name, lim) VALUES ('pool:x', 1)")
        raw.execute("INSERT INTO slot_holders (name, run_id, step_id, attempt, fence, since) VALUES "
                    "('pool:x', 'r1', '', 0, 1, %s)", (T0,))
    finally:
        pg._pool.putconn(raw)
    nxt = pg.commit(commit, T0 + 1).claimed
    att = nxt.attempt
    end = Commit(run_id="r1", expected_rev=nxt.run.rev,
                 step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json='{"ok":true}'),
                 run=RunChange(state="completed", add_steps=1, output_json='{"done":true}'), holds_slots=False,
                 seen=(nxt.run.state, nxt.run.tenant, None, att.state), carry_from=nxt.run)
    # When it ends
    assert pg.commit(end, T0 + 2).run_state == "completed"
    # Then the hot path left it to the shared code, which gave the slot back
    assert sent[("end", "GoGeneral")] == 1
    assert pg.slots(T0 + 3, "pool:x") == []
    assert auditchain.verify(pg).ok


def test_a_hot_submit_with_a_key_used_before_gives_that_run_back(pg, sent):
    # Given a run submitted with an idempotency key
    first, created = pg.submit(new_run("r1", key="k1"), T0)
    # When the same key is submitted again
    again, created_again = pg.submit(new_run("r2", key="k1"), T0 + 1)
    # Then the first run comes back, nothing new is created (the hot path left it to the shared code)
    assert created and not created_again and again.id == "r1"
    assert sent == {("submit", "ok"): 1, ("submit", "GoGeneral"): 1}
    assert [r.id for r in pg.list_runs(limit=10)] == ["r1"]


def test_hot_writes_from_many_threads_share_batches(pg):
    # Given sixteen threads submitting at once
    started = threading.Barrier(16)
    errors = []

    def submit(i):
        started.wait()
        try:
            pg.submit(new_run(f"r{i}"), T0 + i)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    calls = collections.Counter()
    call = hot.HotQueue._call

    def counting(self, batch):
        calls["statements"] += 1
        calls["items"] += len(batch)
        time.sleep(0.01)  # a slow database: the others queue meanwhile
        call(self, batch)

    hot.HotQueue._call = counting
    try:
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        hot.HotQueue._call = call
    # Then every run was written, in fewer statements than runs, and the chain holds
    assert not errors and calls["items"] == 16 and calls["statements"] < 16
    assert len(pg.list_runs(limit=100)) == 16 and auditchain.verify(pg).ok


@pytest.mark.parametrize("way", ["hot", "shared"])
def test_a_carried_steps_due_time_is_put_on_the_database_clock_either_way(pg_schema, sent, monkeypatch, way):
    # Given a store on the database's clock, which runs an hour ahead of this host's
    store = open_store(pg_schema.url(clock="db", migrate="1", pool_max="4"))
    monkeypatch.setattr(type(store), "_offset", lambda self: 3600.0)
    if way == "shared":
        shared_only(monkeypatch)
    try:
        # When a step is committed on the host's clock, carrying its run on to the next step due now
        now = time.time()
        store.submit(new_run("r1"), now)
        (msg,) = store.take_outbox(now + 3600)
        claimed = store.claim(*msg, owner="w1", now=now, slotless=True)
        att = claimed.attempt
        done = store.commit(Commit(
            run_id="r1", expected_rev=claimed.run.rev,
            step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json='{"ok":true}'),
            run=RunChange(add_steps=1), next=NextAttempt("b", 1, "scheduled", now, 30_000), dispatch_inline=True,
            claim_as="w1", carry_from=claimed.run, holds_slots=False,
            seen=(claimed.run.state, claimed.run.tenant, None, att.state)), now)
        # Then the next attempt is due at that moment on the database's clock, as stored and as returned
        (_, nxt) = store.attempts("r1")
        assert nxt.step_id == "b" and abs(nxt.due_at - (now + 3600)) < 5
        assert done.claimed.attempt.due_at == nxt.due_at
        assert (sent[("carry", "ok")] == 1) == (way == "hot")
    finally:
        store.close()
