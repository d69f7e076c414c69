"""Cancellation: `cancelling` then `cancelled`; a running action sees ctx.cancelled(); no new step starts;
timers and approvals are cancelled; completed steps are compensated, newest first."""

from __future__ import annotations

import random
import threading

import pytest
from interp_helpers import S, approval, make_plan

from sealflow.dsl.plan import CompensationPlan, RetryPolicy
from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store


def undo(step_id: str, **kw) -> CompensationPlan:
    return CompensationPlan(action="t.undo", args={"what": "${{ steps." + step_id + ".output.made }}"},
                            timeout_ms=kw.pop("timeout_ms", 5_000), retry=kw.pop("retry", RetryPolicy()))


@pytest.fixture
def world(registry):
    """Actions that record what they did and undid, and a long action that cooperates with cancellation."""
    w = {"done": [], "undone": [], "keys": [], "started": threading.Event(), "saw_cancel": [], "undo_saw_cancel": []}

    @action("t.make", registry=registry)
    def make(ctx, name):
        w["done"].append(name)
        return {"made": name}

    @action("t.long", registry=registry)
    def long(ctx, name):
        w["started"].set()
        for _ in range(500):
            if ctx.cancelled():
                w["saw_cancel"].append(name)
                break
            threading.Event().wait(0.01)
        w["done"].append(name)
        return {"made": name}

    @action("t.undo", registry=registry)
    def undo_(ctx, what):
        w["undone"].append(what)
        w["keys"].append(ctx.idempotency_key)
        w["undo_saw_cancel"].append(ctx.cancelled())
        return {"undone": what}

    return w


def saga_with_a_long_middle():
    return make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("charge", "action", action="t.make", args={"name": "charge"}, compensate=undo("charge")),
                     S("ship", "action", action="t.long", args={"name": "ship"}, compensate=undo("ship"),
                       timeout_ms=20_000),
                     S("notify", "action", action="t.make", args={"name": "notify"}))


def test_cancel_during_a_running_action_stops_the_run_and_compensates_newest_first(runtime, world):
    # Given a run whose third step is running
    run_id = runtime.submit(saga_with_a_long_middle(), {}, initiator="user:ana")
    driver = threading.Thread(target=runtime.drive, args=(run_id,))
    driver.start()
    assert world["started"].wait(10)
    # When it is cancelled
    assert runtime.cancel(run_id, actor="user:ana", reason="customer withdrew").state == "cancelling"
    driver.join(20)
    status = runtime.drive(run_id)
    # Then the action saw ctx.cancelled(), the later step never started, the completed steps (the running one
    # included, it finished) were compensated newest first, and the run is cancelled
    assert world["saw_cancel"] == ["ship"] and "notify" not in world["done"]
    assert world["undone"] == ["ship", "charge", "reserve"]
    assert status.state == "cancelled" and status.error == ("cancelled", "customer withdrew")
    assert [a.step_id for a in status.attempts] == ["reserve", "charge", "ship", "ship@compensate",
                                                    "charge@compensate", "reserve@compensate"]
    assert all(a.state == "succeeded" for a in status.attempts)
    # compensations do not see the cancellation (undoing must finish) and each has its own idempotency key
    assert world["undo_saw_cancel"] == [False, False, False]
    assert world["keys"] == [f"{run_id}:{s}:compensate" for s in ("ship", "charge", "reserve")]
    events = [e.event for e in runtime.audit(run_id)]
    assert events.count("compensation.succeeded") == 3 and "run.compensating" in events
    assert events.index("run.cancelling") < events.index("run.compensating") < events.index("run.cancelled")
    assert runtime.dlq_list() == []


def test_cancel_a_run_waiting_at_an_approval_cancels_the_gate_and_compensates(runtime, world):
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("ok", "approval", approval=approval()),
                     S("ship", "action", action="t.make", args={"name": "ship"}))
    status = runtime.run(plan, {}, initiator="user:ana")
    assert status.state == "waiting" and runtime.store.timers(status.run.id)
    # When it is cancelled while waiting
    status = runtime.cancel(status.run.id, actor="user:ana")
    assert status.state == "compensating"
    status = runtime.drive(status.run.id)
    # Then the approval is cancelled with its timer, nothing else runs, the reservation is undone
    assert status.state == "cancelled" and status.step_states()["ok"] == "cancelled"
    assert runtime.store.timers(status.run.id) == [] and world["undone"] == ["reserve"]
    assert world["done"] == ["reserve"]
    events = [e.event for e in runtime.audit(status.run.id)]
    assert "cancel_requested" in events and "compensation.started" in events


def test_cancel_from_another_process_is_seen_by_the_running_action(tmp_path, registry, providers, clock, world):
    # Given a run executing in one runtime and a second runtime (another process) on the same store
    url = f"sqlite:///{tmp_path}/shared.db"
    mine = Runtime(open_store(url, clock=clock), registry, providers, rng=random.Random(1), worker_timeout_ms=20)
    other = Runtime(open_store(url, clock=clock), registry, providers)
    try:
        run_id = mine.submit(saga_with_a_long_middle(), {}, initiator="user:ana")
        driver = threading.Thread(target=mine.drive, args=(run_id,))
        driver.start()
        assert world["started"].wait(10)
        # When the other one cancels it (the store is the only channel between them)
        other.cancel(run_id, actor="user:ops")
        driver.join(20)
        # Then the action saw it (polling the store) and the run was compensated and cancelled
        assert world["saw_cancel"] == ["ship"]
        assert mine.drive(run_id).state == "cancelled" and world["undone"] == ["ship", "charge", "reserve"]
    finally:
        for rt in (mine, other):
            rt.close()
            rt.store.close()


def test_a_cancelled_runs_requeued_attempt_is_not_started(runtime, world, clock):
    # Given a run cancelled while its worker died mid-step (its lease expires; the attempt is requeued)
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=undo("reserve")),
                     S("ship", "action", action="t.make", args={"name": "ship"}))
    run_id = runtime.submit(plan, {}, initiator="user:ana")
    store = runtime.store
    first = store.active_attempt(run_id)
    claimed = store.claim(run_id, "reserve", first.attempt, first.token, owner="host:1:dead", now=clock.now())
    from sealflow.store.base import Commit, NextAttempt, RunChange, StepChange

    store.commit(Commit(run_id=run_id, expected_rev=claimed.run.rev,
                        step=StepChange("reserve", 1, claimed.attempt.token, "succeeded",
                                        output_json='{"made": "reserve"}'),
                        run=RunChange(add_steps=1), next=NextAttempt("ship", 1, "scheduled", clock.now(), 10_000)),
                 clock.now())
    ship = store.active_attempt(run_id)
    store.claim(run_id, "ship", ship.attempt, ship.token, owner="host:1:dead", now=clock.now())
    assert runtime.cancel(run_id, actor="user:ana").state == "cancelling"
    # When its lease expires and a worker gets the attempt again
    clock.advance(60)
    status = runtime.drive(run_id)
    # Then the step is not started: it ends cancelled, and the completed step is compensated
    assert world["done"] == [] and status.state == "cancelled"
    assert status.step_states() == {"reserve": "succeeded", "ship": "cancelled", "reserve@compensate": "succeeded"}
    assert world["undone"] == ["reserve"]


def test_cancelling_a_compensating_run_changes_nothing(runtime, world, registry):
    undoing, release = threading.Event(), threading.Event()

    @action("t.fail", registry=registry)
    def fail(ctx):
        raise ValueError("no")

    @action("t.slow_undo", registry=registry)
    def slow_undo(ctx, what):
        undoing.set()
        release.wait(10)
        world["undone"].append(what)

    # Given a failed run whose compensation is running
    slow = CompensationPlan(action="t.slow_undo", args={"what": "${{ steps.reserve.output.made }}"},
                            timeout_ms=20_000, retry=RetryPolicy())
    plan = make_plan(S("reserve", "action", action="t.make", args={"name": "reserve"}, compensate=slow),
                     S("boom", "action", action="t.fail"))
    run_id = runtime.submit(plan, {}, initiator="user:ana")
    driver = threading.Thread(target=runtime.drive, args=(run_id,))
    driver.start()
    assert undoing.wait(10)
    # When it is cancelled
    status = runtime.cancel(run_id, actor="user:ana")
    # Then nothing changes: undoing must finish, and the run ends failed as it would have
    assert status.state == "compensating"
    release.set()
    driver.join(20)
    status = runtime.drive(run_id)
    assert status.state == "failed" and status.error[0] == "internal" and world["undone"] == ["reserve"]


def test_cancel_without_anything_to_undo_cancels_at_once(runtime, world):
    plan = make_plan(S("pause", "wait", wait={"for_ms": 3_600_000}), S("ship", "action", action="t.make",
                                                                      args={"name": "ship"}))
    status = runtime.run(plan, {}, initiator="user:ana")
    status = runtime.cancel(status.run.id, actor="user:ana")
    assert status.state == "cancelled" and status.step_states() == {"pause": "cancelled"}
