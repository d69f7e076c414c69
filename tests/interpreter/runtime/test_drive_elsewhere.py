"""`run` waits for its own run: driving a run whose step another process executes returns only when the
run settles, not with the run still `running` mid-way."""

from __future__ import annotations

import threading

import pytest
from interp_helpers import S, make_plan

from sealflow.core.clock import SYSTEM
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


@pytest.fixture
def clock():
    """These tests wait on real time: the store fixture is opened on the system's clock."""
    return SYSTEM


def test_given_another_process_runs_the_step_when_driving_then_drive_returns_once_the_run_ends(
        tmp_path, registry, providers):
    started, release = threading.Event(), threading.Event()

    @action("t.slow", registry=registry)
    def slow(ctx):
        started.set()
        release.wait(10)
        return {"slow": True}

    @action("t.quick", registry=registry)
    def quick(ctx):
        return {"quick": True}

    plan = make_plan(S("slow", "action", action="t.slow", args={}, timeout_ms=30_000),
                     S("quick", "action", action="t.quick", args={}))
    url = f"sqlite:///{tmp_path}/shared.db"
    mine = Runtime(open_store(url, clock=SYSTEM), registry, providers, worker_timeout_ms=20)
    # another process (its own lease owner)
    other = Runtime(open_store(url, clock=SYSTEM), registry, providers, worker_timeout_ms=20, owner="otherhost:4242:1")
    try:
        # Given a run whose first step another process has taken and is executing
        run_id = mine.submit(plan, {}, initiator="user:ana")
        theirs = threading.Thread(target=other.drive, args=(run_id,))
        theirs.start()
        assert started.wait(10)
        # When this process drives it too
        result = {}
        driver = threading.Thread(target=lambda: result.update(status=mine.drive(run_id)))
        driver.start()
        driver.join(1.0)
        # Then it keeps waiting while the step runs elsewhere...
        assert driver.is_alive(), f"drive returned with the run {result['status'].state}"
        release.set()
        driver.join(20)
        theirs.join(20)
        # ...and returns with the run completed, whichever process ran the steps
        assert not driver.is_alive() and result["status"].state == "completed"
    finally:
        release.set()
        for rt in (mine, other):
            rt.close()
            rt.store.close()


def test_given_another_process_took_the_step_and_left_it_when_driving_then_this_process_runs_it(store, registry):
    from sealflow.engine.capability import LEFT_EVENT
    from sealflow.execution.actions import Registry
    from sealflow.runtime.readiness import note_left

    @action("t.only_here", registry=registry)
    def only_here(ctx):
        return {"ran": True}

    plan = make_plan(S("first", "action", action="t.only_here", args={}))
    mine = Runtime(store, registry, {}, clock=SYSTEM, worker_timeout_ms=20)
    # (lacks t.only_here)
    other = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20, owner="otherhost:4242:1")
    try:
        # Given this process started (what it finds sent at start it sends again), then a run whose first step
        # another process took (its message) and left, lacking the action
        mine.start()
        run_id = mine.submit(plan, {}, initiator="user:ana")
        theirs = other.drive(run_id)
        assert theirs.state in ("queued", "running") and theirs.waiting["left_here"] is True
        (left,) = [e for e in store.audit(run_id) if e.event == LEFT_EVENT]
        assert left.actor == "worker:otherhost:4242:1" and left.detail["lacks"] == [["action", "t.only_here"]]
        # Then this process, which has the action, is told who left it and why
        seen = note_left(mine, mine.status(run_id))
        assert seen.waiting["left_by"] == ["worker:otherhost:4242:1"] and seen.waiting["lacks_here"] is False
        # When this process drives it (its redelivery is a minute away)
        done = mine.drive(run_id, timeout=15)
        # Then it takes the step over and the run completes, the step run once
        assert done.state == "completed", done.state
        assert [(a.step_id, a.state) for a in done.attempts] == [("first", "succeeded")]
        # And leaving it again is not audited again by the same process
        assert len([e for e in store.audit(run_id) if e.event == LEFT_EVENT]) == 1
    finally:
        for rt in (mine, other):
            rt.close()


def test_given_every_process_lacks_the_step_when_driving_then_drive_returns_saying_who_left_it(store):
    from sealflow.execution.actions import Registry

    plan = make_plan(S("first", "action", action="t.nowhere", args={}))
    mine = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20)
    other = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20, owner="otherhost:4242:1")
    try:
        # Given this process started, then a run another process took and left (neither has its action)
        mine.start()
        run_id = mine.submit(plan, {}, initiator="user:ana")
        other.drive(run_id)
        # When this process drives it
        got = mine.drive(run_id, timeout=15)
        # Then drive returns (it does not wait for the run deadline), saying this process lacks it too and who
        # else left it
        assert got.state in ("queued", "running") and got.waiting["kind"] == "process"
        assert got.waiting["lacks_here"] is True and got.waiting["left_by"] == ["worker:otherhost:4242:1"]
        assert got.waiting["lacks"] == [["action", "t.nowhere"]]
    finally:
        for rt in (mine, other):
            rt.close()


def test_given_a_forged_message_for_a_step_this_process_lacks_then_nothing_is_audited(store):
    from sealflow.engine.capability import LEFT_EVENT
    from sealflow.execution.actions import Registry

    plan = make_plan(S("first", "action", action="t.nowhere", args={}))
    rt = Runtime(store, Registry(), {}, clock=SYSTEM, worker_timeout_ms=20)
    try:
        # Given a run whose message was taken (sent), on a process that lacks its action
        run_id = rt.submit(plan, {}, initiator="user:ana")
        (msg,) = store.take_outbox(SYSTEM.now())
        # When messages arrive naming the attempt with a wrong token, or another tenant
        rt.engine.handle(msg.run_id, msg.step_id, msg.attempt, msg.token + 99, msg.tenant)
        rt.engine.handle(msg.run_id, msg.step_id, msg.attempt, msg.token, "globex")
        # Then none of them said in the audit that the step was left
        assert [row.sent_at is not None for row in store.outbox(run_id)] == [True]
        assert store.audit(run_id, event=LEFT_EVENT) == []
        # And the real message is left (its row stays sent, for a redelivery) and said once
        rt.engine.handle(msg.run_id, msg.step_id, msg.attempt, msg.token, msg.tenant)
        assert len(store.audit(run_id, event=LEFT_EVENT)) == 1
    finally:
        rt.close()
