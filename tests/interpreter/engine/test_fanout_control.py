"""Operating a fan-out, on every store: cancel mid-map, approvals inside a sub-flow (per item), what
``status`` shows, and who may see a child run (its parent's tenant and initiator; nobody else).
"""

from __future__ import annotations

import threading

import pytest
from fanout_helpers import map_of, map_over, serving, wait_for

from sealflow.core.states import RUN_FINAL
from sealflow.runtime.status import status_json
from sealflow.store import NotFound
from sealflow.store.records import RunQuery

USER = "user:ana"


@pytest.fixture(name="serving")
def serving_world(world):
    """The world's runtime working, dispatching and sweeping on a background thread (as `sealflow worker`)."""
    with serving(world) as w:
        yield w


def test_cancelling_the_run_mid_map_cancels_every_item_and_starts_no_more(serving):
    # Given a map of 5 items, 2 at a time, whose first two hold until released, both running
    rt = serving.rt
    run_id = rt.submit(map_of("input.items", concurrency=2), {"items": ["hold0", "hold1", "a2", "a3", "a4"]},
                       initiator=USER)
    wait_for(lambda: sorted(serving.started) == ["hold0", "hold1"])
    # When the run is cancelled, and then the held actions are released
    assert rt.cancel(run_id, actor=USER).state == "cancelled"
    kids = rt.store.children(run_id)
    assert [k.state for k in kids] == ["cancelling", "cancelling", "cancelled", "cancelled", "cancelled"]
    serving.release.set()
    wait_for(lambda: all(k.state in RUN_FINAL for k in rt.store.children(run_id)))
    # Then every item ends cancelled, and no item after the first two ever started
    assert [k.state for k in rt.store.children(run_id)] == ["cancelled"] * 5
    assert sorted(serving.started) == ["hold0", "hold1"]
    assert rt.store.get_run(run_id).state == "cancelled"


def test_an_approval_inside_a_sub_flow_waits_per_item(world):
    # Given a map of two items whose sub-flow asks a manager, then records the item
    plan = map_over("""        - id: ask
          approval: {approvers: [role:manager], timeout: 1h}
        - id: after
          set: {item: "item"}
""", concurrency=2)
    rt = world.rt
    status = rt.run(plan, {"items": ["x", "y"]}, initiator=USER)
    # When it has settled, then the run waits on its fan-out, and each item waits for its own approval
    assert status.state == "waiting" and status.waiting["kind"] == "fanout"
    kids = rt.store.children(status.run.id)
    assert [rt.status(k.id).waiting["kind"] for k in kids] == ["approval", "approval"]
    # and a manager's approvals list shows each item (and the run's input) to decide on, the parent's attempt
    # due only when its children wake it
    listed = sorted(rt.approvals_waiting("user:bob", "default"), key=lambda w: w["run_id"])
    assert [(w["item"]["index"], w["item"]["value"], w["input"]) for w in listed] == \
        [(0, "x", {"items": ["x", "y"]}), (1, "y", {"items": ["x", "y"]})]
    assert rt.store.active_attempt(status.run.id).due_at is None
    # When the first item is approved, then only it goes on; the run still waits for the second
    rt.approve(kids[0].id, actor="user:bob")
    assert rt.drive(status.run.id).state == "waiting"
    assert [k.state for k in rt.store.children(status.run.id)] == ["completed", "waiting"]
    # When the second is approved too, then the run completes with both items' outputs in order
    rt.approve(kids[1].id, actor="user:bob")
    done = rt.drive(status.run.id, until="final")
    assert done.state == "completed"
    assert rt.store.results(done.run.id)["each"][1] == '[{"item":"x"},{"item":"y"}]'


def test_status_counts_items_by_state_lists_failures_and_pages_child_runs(world):
    # Given a finished map of 5 items tolerating two failures, two of which failed
    plan = map_of("input.items", concurrency=5, tolerate=2)
    status = world.rt.run(plan, {"items": ["a0", "fail1", "a2", "fail3", "a4"]}, initiator=USER, until="final")
    assert status.state == "completed"
    # When its status is read, then the map step shows its items by state with the failures listed
    shown = status_json(world.rt.status(status.run.id))
    items = next(s for s in shown["steps"] if s["id"] == "each")["items"]
    assert items["total"] == 5 and items["counts"] == {"completed": 3, "failed": 2}
    assert [f["index"] for f in items["failures"]] == [1, 3] or [f["index"] for f in items["failures"]] == [3, 1]
    assert all(f["error"]["class"] for f in items["failures"])
    # and the child runs in index order, a page at a time
    assert [c["index"] for c in shown["children"]["runs"]] == [0, 1, 2, 3, 4]
    assert shown["children"]["next_offset"] is None
    from sealflow.runtime.status import run_status

    page = run_status(world.rt.store, status.run.id, children_offset=1, children_limit=2)
    assert [c.index for c in page.children] == [1, 2] and page.children_next == 3
    # and a child's status names its parent and item
    child = status_json(world.rt.status(shown["children"]["runs"][0]["run_id"]))
    assert child["parent"] == {"run_id": status.run.id, "step": "each", "attempt": 1, "index": 0}
    assert child["item"] == "a0"
    # and run lists show the top-level run only
    listed = world.rt.store.query_runs(RunQuery(tenant="default"))
    assert [r.id for r in listed] == [status.run.id]
    # and so do their counts by state, unfiltered and filtered
    assert world.rt.store.count_runs(RunQuery(tenant="default")) == {status.run.state: 1}
    assert world.rt.store.count_runs(RunQuery(tenant="default", workflow=status.run.workflow)) == {
        status.run.state: 1}


def test_an_outsider_cannot_see_or_cancel_a_child_run(rt, registry):
    # Given (under the ACME policy) alice's map run of two items held by an approval each
    plan = map_over("""        - id: ask
          approval: {approvers: [role:manager], timeout: 1h}
""", concurrency=2)
    status = rt.run(plan, {"items": [1, 2]}, initiator="user:alice", tenant="acme")
    kids = rt.store.children(status.run.id)
    assert len(kids) == 2
    # When eve of another tenant names a child run, then there is no such run, to read, cancel or approve
    with pytest.raises(NotFound):
        rt.status(kids[0].id, actor="user:eve")
    with pytest.raises(NotFound):
        rt.cancel(kids[0].id, actor="user:eve")
    with pytest.raises(NotFound):
        rt.approve(kids[0].id, actor="user:eve")
    # and alice (the initiator) may read it; bob (a manager of acme) approves its gate like any other
    assert rt.status(kids[0].id, actor="user:alice").state == "waiting"
    rt.approve(kids[0].id, actor="user:bob")
    assert rt.store.get_run(kids[0].id).state in ("running", "queued", "completed")


def test_a_trust_gated_worker_runs_children_of_a_trusted_run_and_refuses_a_child_plan_not_derived(gated, monkeypatch):
    # Given a worker with a trust gate (unsigned runs allowed: the parent run passes it)
    from sealflow.steps import fanout

    world = gated
    rt = world.rt
    plan = map_of("input.items", concurrency=2)
    # When a map runs whose children execute the sub-flow the parent's plan derives, then it completes
    assert rt.run(plan, {"items": ["a0", "a1"]}, initiator=USER, until="final").state == "completed"
    # When the children are given a plan that is not that sub-flow (a forged one, recording "forged")
    real, start = fanout.child_plan, fanout.start

    def forged(p, step, branch=None):
        sub = real(p, step, branch)
        steps = tuple(s.model_copy(update={"args": {"label": "forged"}}) for s in sub.steps)
        return sub.model_copy(update={"steps": steps}).with_digest()

    def forging_start(x):
        monkeypatch.setattr(fanout, "child_plan", forged)
        try:
            return start(x)
        finally:
            monkeypatch.setattr(fanout, "child_plan", real)

    monkeypatch.setattr(fanout, "start", forging_start)
    status = rt.run(plan, {"items": ["b0", "b1"]}, initiator=USER, until="final")
    # Then no child step ran: each was refused as unauthorized, and so the step failed
    assert status.state == "failed" and status.run.error_class == "unauthorized"
    assert "forged" not in {r[0] for r in world.rows("SELECT label FROM intervals")}
    assert {k.error_class for k in rt.store.children(status.run.id)} <= {"unauthorized", "cancelled"}


def test_pruning_keeps_a_finished_item_while_its_run_is_in_progress(world):
    # Given a map of two items, the first finished (approved), the second still waiting for its approval
    plan = map_over("""        - {id: ask, approval: {approvers: [role:manager], timeout: 1h}}
""", concurrency=2)
    rt = world.rt
    status = rt.run(plan, {"items": ["x", "y"]}, initiator=USER)
    first, second = rt.store.children(status.run.id)
    rt.approve(first.id, actor="user:bob")
    rt.drive(status.run.id)
    assert rt.store.get_run(first.id).state == "completed"
    # When every finished run is pruned, then the finished item stays: its run still reads it
    later = rt.clock.now() + 10_000
    rt.store.prune_runs(later, rt.clock.now())
    assert [k.id for k in rt.store.children(status.run.id)] == [first.id, second.id]
    # When the run completes and is pruned, then it goes with its items
    rt.approve(second.id, actor="user:bob")
    assert rt.drive(status.run.id, until="final").state == "completed"
    rt.store.prune_runs(later, rt.clock.now())
    assert rt.store.children(status.run.id) == []
    assert rt.store.fanout(status.run.id, "each", 1) is None


def test_a_worker_lost_while_deciding_a_fan_out_neither_fails_it_nor_starts_it_twice(serving, monkeypatch):
    # Given a map of two items whose deciding attempt (after both ended) stalls in its first try

    from sealflow.steps import fanout

    rt = serving.rt
    real, entered, go, calls = fanout.collect, threading.Event(), threading.Event(), []

    def stalling(x):
        calls.append(x.attempt.token)
        if len(calls) == 1:
            entered.set()
            go.wait(20)
        return real(x)

    monkeypatch.setattr(fanout, "collect", stalling)
    run_id = rt.submit(map_of("input.items"), {"items": ["a0", "a1"]}, initiator=USER)
    wait_for(entered.is_set)
    # When its lease is ended as if its worker had died (the sweeper requeues it for another claim)
    rt.store.expire_leases(rt.owner, rt.clock.now())
    wait_for(lambda: rt.store.get_run(run_id).state in RUN_FINAL)
    go.set()
    # Then the attempt was decided again from the store: the run completed, no child was started twice
    run = rt.store.get_run(run_id)
    assert run.state == "completed" and len(calls) == 2
    assert [k.output for k in rt.store.children(run_id)] == ["done:a0", "done:a1"]
    assert sorted(r[0] for r in serving.rows("SELECT label FROM intervals")) == ["a0", "a1"]
