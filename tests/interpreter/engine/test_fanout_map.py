"""``map`` at run time, on every store: a child run per item, outputs in item order, the concurrency bound,
failures with and without tolerance, bad item lists refused, and ``parallel`` branches.

The actions (fanout_helpers.World) record their intervals in real time; the bound is checked on those.
"""

from __future__ import annotations

import json

import pytest
from fanout_helpers import definition, map_of, map_over, most_at_once

from sealflow.steps import fanout

USER = "user:ana"


def output_of(rt, run_id: str, step: str):
    status, out = rt.store.results(run_id)[step]
    return status, None if out is None else json.loads(out)


def test_outputs_come_in_item_order_and_no_more_than_concurrency_items_run_at_once(world):
    # Given a map of 8 items, 3 at a time, on a worker with 4 threads
    plan = map_of("input.items", concurrency=3)
    items = [f"i{n}" for n in range(8)]
    # When it runs to the end
    status = world.rt.run(plan, {"items": items}, initiator=USER, until="final")
    # Then it completed; the step's output lists each item's output in item order
    assert status.run.state == "completed"
    assert output_of(world.rt, status.run.id, "each") == ("succeeded", [f"done:{i}" for i in items])
    # and each item ran once as its own child run, never more than 3 at once
    spans = world.rows("SELECT start, end FROM intervals")
    assert len(spans) == 8 and most_at_once(spans) <= 3
    kids = world.rt.store.children(status.run.id)
    assert [k.index for k in kids] == list(range(8)) and {k.state for k in kids} == {"completed"}


def test_a_failing_item_without_tolerance_fails_the_step_with_its_class_and_cancels_the_rest(world):
    # Given a map of 6 items, one at a time, whose second item fails (no retry, nothing tolerated)
    plan = map_of("input.items", concurrency=1)
    # When it runs
    status = world.rt.run(plan, {"items": ["a0", "fail1", "a2", "a3", "a4", "a5"]}, initiator=USER, until="final")
    run = world.rt.store.get_run(status.run.id)
    # Then the run failed with the item's error class, naming the item
    assert run.state == "failed" and "item 1 failed" in run.error_message
    kids = world.rt.store.children(run.id)
    assert kids[1].error_class == run.error_class
    # and the items not started were cancelled, never run; only the parent is in the dead-letter list
    assert [k.state for k in kids] == ["completed", "failed"] + ["cancelled"] * 4
    assert sorted(r[0] for r in world.rows("SELECT label FROM intervals")) == ["a0", "fail1"]
    assert [d.run_id for d in world.rt.store.dead_letters()] == [run.id]


def test_a_failing_map_takes_its_on_error_route(world):
    # Given a map whose step routes internal failures to a recovery step
    plan = map_over("""        - {id: rec, action: t.record, with: {label: "${{ item }}"}, retry: {max_attempts: 1}}
    on_error: [{errors: [internal], next: recover}]
    next: end
  - id: recover
    set: {recovered: "true"}
""", concurrency=2)
    # When an item fails
    status = world.rt.run(plan, {"items": ["fail0", "a1"]}, initiator=USER, until="final")
    # Then the route is taken and the run completes
    assert status.run.state == "completed"
    assert output_of(world.rt, status.run.id, "recover") == ("succeeded", {"recovered": True})
    assert output_of(world.rt, status.run.id, "each")[0] == "failed"


@pytest.mark.parametrize("tolerate", [1, "50%"])
def test_tolerated_failures_give_null_outputs_and_are_listed(world, tolerate):
    # Given a map of 4 items tolerating one failure (a count, or 50% of 4 = 2)
    plan = map_of("input.items", concurrency=2, tolerate=tolerate)
    # When one item fails
    status = world.rt.run(plan, {"items": ["a0", "fail1", "a2", "a3"]}, initiator=USER, until="final")
    # Then the step succeeds with null for the failed item, in order
    assert status.run.state == "completed"
    assert output_of(world.rt, status.run.id, "each") == ("succeeded", ["done:a0", None, "done:a2", "done:a3"])
    # and the step's record lists the failure
    att = [a for a in world.rt.store.attempts(status.run.id) if a.step_id == "each"][-1]
    failures = att.data["fanout"]["failures"]
    assert [(f["index"], f["state"]) for f in failures] == [(1, "failed")]


def test_more_failures_than_a_percentage_tolerates_fail_the_step(world):
    # Given 3 items tolerating 34% (one item), two of which fail
    plan = map_of("input.items", concurrency=3, tolerate="34%")
    status = world.rt.run(plan, {"items": ["fail0", "a1", "fail2"]}, initiator=USER, until="final")
    # Then the step fails: more failed than tolerated
    assert status.run.state == "failed" and "2 of 3 failed, 1 tolerated" in status.run.error_message


@pytest.mark.parametrize("items, why", [('{"a": 1}', "not a list"), ("[1, 2, 3]", "more than its max_items (2)")])
def test_items_that_are_not_a_list_or_too_many_fail_the_step_as_invalid_request(world, items, why):
    # Given a map whose items expression gives a map, or more items than max_items
    plan = map_of("input.items", max_items=2)
    status = world.rt.run(plan, {"items": json.loads(items)}, initiator=USER, until="final")
    # Then the step fails with invalid_request saying why, and no child run exists
    assert status.run.state == "failed" and status.run.error_class == "invalid_request"
    assert why in status.run.error_message
    assert world.rt.store.children(status.run.id) == []


def test_items_over_the_byte_bound_fail_the_step_as_invalid_request(world, monkeypatch):
    # Given a byte bound of 100 bytes and items of 3 x 50 bytes
    monkeypatch.setattr(fanout, "MAX_ITEMS_BYTES", 100)
    plan = map_of("input.items")
    status = world.rt.run(plan, {"items": ["x" * 48] * 3}, initiator=USER, until="final")
    # Then the step fails as invalid_request naming the bound and the claim-check remedy; no child was created
    assert status.run.error_class == "invalid_request"
    assert "100-byte bound" in status.run.error_message and "claim-check" in status.run.error_message
    assert world.rt.store.children(status.run.id) == []


def test_an_empty_list_gives_an_empty_output_without_children(world):
    status = world.rt.run(map_of("input.items"), {"items": []}, initiator=USER, until="final")
    assert status.run.state == "completed"
    assert output_of(world.rt, status.run.id, "each") == ("succeeded", [])


def test_items_see_item_index_and_the_steps_before_the_map(world):
    # Given a step before the map, and a sub-flow of two steps reading item, index, it, and its own first step
    plan = definition("""  - id: base
    set: {offset: "100"}
  - id: each
    map:
      items: "input.items"
      concurrency: 2
      max_items: 10
      steps:
        - id: first
          set: {v: "item + index + steps.base.output.offset"}
        - id: second
          set: {w: "steps.first.output.v * 2", run: "run.id", k: "input.k"}
""")
    # When it runs
    status = world.rt.run(plan, {"items": [1, 2, 3], "k": 7}, initiator=USER, until="final")
    # Then each item's output is its last step's, computed from its own item and index, the earlier step and
    # the run's input; `run.id` is the run's (the parent's) id
    rid = status.run.id
    assert output_of(world.rt, rid, "each") == ("succeeded", [{"w": 202, "run": rid, "k": 7},
                                                            {"w": 206, "run": rid, "k": 7},
                                                            {"w": 210, "run": rid, "k": 7}])


def test_parallel_branches_all_run_and_give_their_outputs_in_branch_order(world):
    # Given a parallel of three branches, one of two steps
    plan = definition("""  - id: both
    parallel:
      branches:
        - steps: [{id: left, action: t.record, with: {label: "L"}}]
        - steps: [{id: mid, set: {v: "2"}}, {id: mid2, set: {v: "steps.mid.output.v + 1"}}]
        - steps: [{id: right, action: t.record, with: {label: "R"}}]
""")
    status = world.rt.run(plan, {}, initiator=USER, until="final")
    # Then the output lists each branch's last output, in branch order
    assert status.run.state == "completed"
    assert output_of(world.rt, status.run.id, "both") == ("succeeded", ["done:L", {"v": 3}, "done:R"])


def test_a_failing_branch_fails_the_parallel_step(world):
    plan = definition("""  - id: both
    parallel:
      branches:
        - steps: [{id: left, action: t.record, with: {label: "fail-L"}, retry: {max_attempts: 1}}]
        - steps: [{id: right, action: t.record, with: {label: "R"}}]
""")
    status = world.rt.run(plan, {}, initiator=USER, until="final")
    assert status.run.state == "failed" and "branch 0 failed" in status.run.error_message


def test_a_redriven_map_replays_completed_items_from_the_ledger_and_reruns_the_rest(world):
    # Given a map whose item step has an idempotency key naming the run and the index, one item at a time,
    # whose item "b" fails the first time only (not retried), so the run fails into the dead letters
    from sealflow.execution.actions import action

    calls: list[str] = []

    @action("t.flaky", registry=world.registry)
    def flaky(ctx, label: str):
        calls.append(label)
        if label == "b" and calls.count("b") == 1:
            raise ValueError("b fails once")
        return f"ok:{label}"

    plan = map_over("""        - id: work
          action: t.flaky
          with: {label: "${{ item }}"}
          idempotency_key: "${{ run.id }}:work:${{ index }}"
          retry: {max_attempts: 1}
""", concurrency=1, name="fan-redrive")
    rt = world.rt
    status = rt.run(plan, {"items": ["a", "b", "c"]}, initiator=USER, until="final")
    assert status.state == "failed" and calls == ["a", "b"]
    # When it is redriven
    rt.dlq_redrive(status.run.id, actor=USER)
    done = rt.drive(status.run.id, until="final")
    # Then it completes; item a's recorded result was replayed (not called again), b and c ran
    assert done.state == "completed"
    assert output_of(rt, done.run.id, "each") == ("succeeded", ["ok:a", "ok:b", "ok:c"])
    assert calls == ["a", "b", "b", "c"]
