"""The fast path of the store, on every backend: a commit that claims the run's next attempt for the worker
going on (``Commit.claim_as``), results read only when used, and concurrent writers sharing commits
(PostgreSQL's group commit, ``store/postgres/batching.py``) without mixing up their outcomes."""

from __future__ import annotations

import contextlib
import dataclasses
import threading

import psycopg
import pytest
from test_store_suite import T0, new_run, submit_and_claim, succeed_and_go

from sealflow.store import (
    Commit,
    FencingError,
    IllegalTransition,
    MessageRefused,
    RunChange,
    StepChange,
    auditchain,
    open_store,
)
from sealflow.store.records import LazyResults


def finish(claimed, now=T0):
    att = claimed.attempt
    return Commit(run_id=att.run_id, expected_rev=claimed.run.rev,
                  step=StepChange(att.step_id, att.attempt, att.token, "succeeded", output_json='{"ok":true}'),
                  run=RunChange(state="completed", add_steps=1, output_json='{"done":true}'))


def test_a_commit_that_carries_on_claims_the_next_attempt_in_the_same_transaction(store):
    # Given step a of a run, claimed by worker w1
    claimed, _ = submit_and_claim(store)
    # When w1 commits a and goes on with the run (claim_as)
    done = store.commit(dataclasses.replace(succeed_and_go(claimed), claim_as="w1"), T0 + 1)
    # Then the next attempt b is claimed for w1 in that same commit: running under its lease, token moved on,
    # no outbox row left to send
    (msg,) = done.messages
    nxt = done.claimed
    assert nxt is not None and (nxt.attempt.step_id, nxt.attempt.state, nxt.attempt.lease_owner) == ("b", "running",
                                                                                                       "w1")
    assert nxt.attempt.token == msg.token + 1 and nxt.run.state == "running"
    assert store.active_attempt("r1").state == "running" and store.outbox("r1") == []
    # and the message itself, should it arrive too, is refused as stale (the step runs once)
    with pytest.raises(MessageRefused):
        store.claim(*msg, owner="w2", now=T0 + 1)
    # and b commits with the carried claim's token, and the audit chain holds
    assert store.commit(finish(nxt), T0 + 2).run_state == "completed"
    events = store.audit("r1")
    assert [e.event for e in events].count("step.running") == 2
    assert auditchain.verify(store).ok
    # and b's scheduling and its claim are one audit row (pending -> running, naming who scheduled it), not two
    b_rows = [(e.event, e.state_before, e.state_after) for e in events if e.step_id == "b"]
    assert b_rows[0] == ("step.running", "pending", "running") and ("step.scheduled", "pending", "scheduled") \
        not in b_rows
    assert "scheduled_by" in (next(e for e in events if e.step_id == "b").detail or {})


def test_a_carried_claim_takes_the_runs_unchanging_fields_from_the_engines_record(store):
    # Given step a of a run, claimed by w1, and the run's record as the engine holds it (its input decoded)
    claimed, _ = submit_and_claim(store)
    held = dataclasses.replace(claimed.run, input={"decoded": "by the engine"})
    # When w1 commits a and goes on with the run, handing that record over (carry_from)
    done = store.commit(dataclasses.replace(succeed_and_go(claimed), claim_as="w1", carry_from=held), T0 + 1)
    # Then the claimed run's unchanging fields are the handed record's (not read back and decoded again), and
    # the fields the commit changed are the store's
    run, stored = done.claimed.run, store.get_run("r1")
    assert run.input == {"decoded": "by the engine"} and stored.input == {"n": 1}
    assert (run.state, run.rev, run.steps_executed, run.cursor_step, run.cursor_attempt, run.updated_at) == (
        stored.state, stored.rev, stored.steps_executed, stored.cursor_step, stored.cursor_attempt, stored.updated_at)
    assert dataclasses.replace(run, input=stored.input) == stored
    # and a record of another run is not used
    other, _ = submit_and_claim(store, "r2")
    done = store.commit(dataclasses.replace(succeed_and_go(other), claim_as="w1", carry_from=held), T0 + 1)
    assert done.claimed.run == store.get_run("r2")


def test_a_commit_without_claim_as_leaves_the_next_attempt_to_its_message(store):
    # Given step a claimed
    claimed, _ = submit_and_claim(store)
    # When it commits without going on
    done = store.commit(succeed_and_go(claimed), T0 + 1)
    # Then nothing is claimed: b is scheduled and its message is the way to it
    assert done.claimed is None and store.active_attempt("r1").state == "scheduled"
    assert store.claim(*done.messages[0], owner="w2", now=T0 + 1).attempt.lease_owner == "w2"


def test_a_carried_claim_is_fenced_like_any_other(store):
    # Given b claimed by w1 through its commit of a
    claimed, _ = submit_and_claim(store)
    nxt = store.commit(dataclasses.replace(succeed_and_go(claimed), claim_as="w1"), T0 + 1).claimed
    # When a commit of b arrives with the token b had before the claim
    stale = dataclasses.replace(finish(nxt), step=dataclasses.replace(finish(nxt).step, token=nxt.attempt.token - 1))
    # Then it is refused and nothing changes
    with pytest.raises(FencingError):
        store.commit(stale, T0 + 2)
    assert store.get_run("r1").state == "running"


def test_a_claim_reads_the_results_only_when_they_are_used(store):
    # Given a run whose step a succeeded, and b claimed
    claimed, _ = submit_and_claim(store)
    done = store.commit(succeed_and_go(claimed), T0 + 1)
    got = store.claim(*done.messages[0], owner="w1", now=T0 + 1)
    # Then the claim hands out results read on first use, which are the run's results
    assert isinstance(got.results, LazyResults)
    assert dict(got.results) == store.results("r1") == {"a": ("succeeded", '{"ok":true}')}


def test_concurrent_writers_each_get_their_own_outcome(store):
    # Given 24 runs, each at its first step, claimed
    runs = []
    for i in range(24):
        claimed, _ = submit_and_claim(store, f"r{i}")
        runs.append(claimed)
    results: dict[str, object] = {}

    def work(claimed):
        try:
            if claimed.run.id in ("r3", "r7"):  # a stale token: refused, and only this commit
                bad = succeed_and_go(claimed)
                store.commit(dataclasses.replace(bad, step=dataclasses.replace(bad.step, token=1)), T0 + 1)
            nxt = store.commit(dataclasses.replace(succeed_and_go(claimed), claim_as="w1"), T0 + 1).claimed
            results[claimed.run.id] = store.commit(finish(nxt), T0 + 2).run_state
        except FencingError:
            results[claimed.run.id] = "fenced"

    # When 8 threads commit them at once (on PostgreSQL their writes share commits)
    threads = [threading.Thread(target=lambda part=runs[k::8]: [work(c) for c in part]) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Then every run has its own outcome, and every tenant's chain verifies
    assert results == {f"r{i}": "fenced" if i in (3, 7) else "completed" for i in range(24)}
    assert all(store.get_run(f"r{i}").state == ("running" if i in (3, 7) else "completed") for i in range(24))
    assert auditchain.verify(store).ok


@contextlib.contextmanager
def pg_store_with_r1(pg_schema):
    """A PostgreSQL store (on the caller's clock) holding run r1, closed at the end."""
    store = open_store(pg_schema.url(clock="caller", migrate="1"))
    try:
        store.submit(new_run("r1"), T0)
        yield store
    finally:
        store.close()


def in_one_batch(group, leader, member) -> None:
    """Run ``leader`` (which opens a batch and waits in it) and then ``member`` (which joins it), both to the end."""
    first = threading.Thread(target=leader)
    first.start()
    while group._open is None:
        threading.Event().wait(0.001)
    second = threading.Thread(target=member)
    second.start()
    first.join(30)
    second.join(30)


def test_a_failing_member_of_a_batch_is_undone_alone(pg_schema):
    # Given a PostgreSQL store and two writers in one batch: the leader waits inside its transaction until
    # the second has joined
    with pg_store_with_r1(pg_schema) as store:
        group = store._group
        joined = threading.Event()
        outcome: dict[str, object] = {}

        def leader():
            try:
                with store._tx() as c:
                    c.execute("UPDATE runs SET initiator = 'user:leader' WHERE id = 'r1'")
                    while not (group._open is not None and group._open.members == 2):
                        threading.Event().wait(0.005)
                    joined.set()
                    raise RuntimeError("the leader's own failure")
            except RuntimeError as exc:
                outcome["leader"] = str(exc)

        def member():
            with store._tx() as c:
                c.execute("UPDATE runs SET workflow = 'wf-member' WHERE id = 'r1'")
            outcome["member"] = "committed"

        in_one_batch(group, leader, member)
        # When the leader's operation fails after the member joined
        # Then the leader gets its error, its write is undone; the member's write is committed
        assert joined.is_set() and outcome == {"leader": "the leader's own failure", "member": "committed"}
        run = store.get_run("r1")
        assert (run.initiator, run.workflow) == ("user:ana", "wf-member")


def test_a_member_whose_statement_the_database_refuses_is_undone_alone(pg_schema):
    # Given a PostgreSQL store and two writers in one batch, on a connection in pipeline mode (a write is
    # sent without waiting for the server, so a refusal arrives later): the leader writes and waits until
    # the second has joined; the second (its turn comes after the leader's: members take turns) writes a row
    # the database refuses (a duplicate key)
    with pg_store_with_r1(pg_schema) as store:
        group = store._group
        outcome: dict[str, object] = {}

        def leader():
            with store._tx() as c:
                c.execute("UPDATE runs SET initiator = 'user:leader' WHERE id = 'r1'")
                while not (group._open is not None and group._open.members == 2):
                    threading.Event().wait(0.005)
            outcome["leader"] = "committed"

        def member():
            try:
                with store._tx() as c:
                    c.execute("UPDATE runs SET workflow = 'wf-member' WHERE id = 'r1'")
                    c.execute("INSERT INTO plans (digest, workflow, version, body, created_at) "
                              "SELECT digest, workflow, version, body, created_at FROM plans LIMIT 1")
            except psycopg.errors.UniqueViolation:
                outcome["member"] = "refused"

        in_one_batch(group, leader, member)
        # When the batch commits
        # Then the member gets the database's refusal of its own statement, and all of its writes are undone;
        # the leader's write is committed
        assert outcome == {"leader": "committed", "member": "refused"}
        run = store.get_run("r1")
        assert (run.initiator, run.workflow) == ("user:leader", "wf")


def test_a_batch_whose_member_audits_an_illegal_transition_chains_the_others_on_the_moved_head(pg_schema):
    """A member whose operation is refused as an illegal transition writes its audit event at once, inside the
    batch, moving its tenant's head: the other members' events, chained at the commit, must be chained on
    the moved head."""
    store = open_store(pg_schema.url(clock="caller", migrate="1"))
    try:
        # Given two runs of one tenant, r2's step a already succeeded
        claimed, _ = submit_and_claim(store, "r2")
        store.commit(succeed_and_go(claimed, next_step=None, state="completed"), T0)
        store.submit(new_run("r1"), T0)
        att = store.attempts("r2")[0]
        group = store._group
        outcome: dict[str, object] = {}

        def leader():  # an audited write of r1, then waits for the member to join
            with store._tx() as c:
                c.execute("UPDATE runs SET initiator = 'user:leader' WHERE id = 'r1'")
                store._audit(c, T0, "r1", None, "run.noted", "user:leader")
                while not (group._open is not None and group._open.members == 2):
                    threading.Event().wait(0.005)
            outcome["leader"] = "committed"

        def member():  # moves r2's succeeded step back to running: refused, and audited at once
            bad = Commit(run_id="r2", expected_rev=store.get_run("r2").rev,
                         step=StepChange("a", 1, att.token, "running"))
            try:
                store.commit(bad, T0)
            except IllegalTransition:
                outcome["member"] = "refused"

        # When both run in one batch
        in_one_batch(group, leader, member)
        # Then the leader's write and event are committed, the refusal is audited, and the chain verifies
        assert outcome == {"leader": "committed", "member": "refused"}
        assert store.get_run("r1").initiator == "user:leader"
        assert [e.event for e in store.audit("r1")][-1] == "run.noted"
        assert store.audit("r2")[-1].event == "illegal_transition"
        assert auditchain.verify(store).ok
    finally:
        store.close()


def test_a_member_done_after_the_leader_commits_the_batch_and_the_leader_returns_only_after(pg_schema):
    """Whoever is done last commits (the leader here is done first): nobody returns before the commit."""
    with pg_store_with_r1(pg_schema) as store:
        group = store._group
        member_in, leader_out = threading.Event(), threading.Event()
        seen: dict[str, object] = {}

        def leader():
            with store._tx() as c:
                c.execute("UPDATE runs SET initiator = 'user:leader' WHERE id = 'r1'")
                while not (group._open is not None and group._open.members == 2):
                    threading.Event().wait(0.005)
            # (returns only after the batch committed: what it wrote is there for everyone)
            seen["leader"] = store.get_run("r1").initiator
            leader_out.set()

        def member():
            with store._tx() as c:
                member_in.set()
                c.execute("UPDATE runs SET workflow = 'wf-member' WHERE id = 'r1'")
                # the leader is done and waits for the commit, which is this member's to make
                seen["leader_waited"] = not leader_out.wait(0.5)
            seen["member"] = store.get_run("r1").workflow

        # When the leader is done while the member is still inside its operation
        in_one_batch(group, leader, member)
        # Then the leader did not return before the member was done; both writes were committed together
        assert member_in.is_set() and seen == {"leader_waited": True, "leader": "user:leader", "member": "wf-member"}
