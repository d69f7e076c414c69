"""A fan-out spends its run's budget, and undoes its completed items when it fails, on every store.

Each child run's usage (steps, tokens, cost, tool calls) is added to its parent run's counters in the child's
commit, so the run budget sees every item's calls: exhausted mid-map, the remaining items stop and the step fails
with ``budget_exceeded`` whatever ``tolerate_failures`` says. A map failing beyond its tolerance starts the
compensations of its completed items, each in its own child run (newest step first).
"""

from __future__ import annotations

import pytest
from fanout_helpers import World, definition
from interp_helpers import BACKENDS, FakeProvider

from sealflow.interpreter.execution.actions import action
from sealflow.interpreter.service.runtime import Runtime
from sealflow.interpreter.store import open_store

USER = "user:ana"


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fan.db"
    return request.getfixturevalue("pg_schema").url(migrate="1")


@pytest.fixture
def world(url, tmp_path):
    w = World(str(tmp_path / "world.db"))
    w.model = FakeProvider("ok", tokens=10)
    w.undone = []

    @action("t.undo", registry=w.registry)
    def undo(ctx, label: str):
        w.undone.append((label, ctx.idempotency_key))
        return {"undone": label}

    w.rt = Runtime(open_store(url), w.registry, {"fake": w.model}, worker_threads=3, worker_timeout_ms=20)
    yield w
    w.rt.close()
    w.rt.store.close()


def test_a_run_budget_exhausted_mid_map_stops_the_items_and_fails_the_step(world):
    # Given a run budget of 45 tokens and a map of 8 items, one at a time, each a model call of up to 20 tokens
    # (10 used), tolerating every failure
    plan = definition("""  - id: each
    map:
      items: "input.items"
      concurrency: 1
      max_items: 10
      tolerate_failures: 8
      steps:
        - id: ask
          ai: {model: fake, prompt: {template: "say ${{ item }}"}, max_tokens: 20}
""", name="fan-budget")
    plan = plan.model_copy(update={"budget": plan.budget.model_copy(update={"max_tokens": 45})}).with_digest()
    status = world.rt.run(plan, {"items": list(range(8))}, initiator=USER, until="final")
    run = world.rt.store.get_run(status.run.id)
    # Then three items ran (30 tokens, counted on the run), the fourth was refused before calling the model,
    # the step failed with budget_exceeded despite the tolerance, and the rest never started
    assert run.state == "failed" and run.error_class == "budget_exceeded"
    assert run.tokens == 30 and len(world.model.requests) == 3
    kids = world.rt.store.children(run.id)
    assert [k.state for k in kids] == ["completed"] * 3 + ["failed"] + ["cancelled"] * 4
    assert kids[3].error_class == "budget_exceeded"


def test_max_steps_counts_every_item_step_on_the_run(world):
    # Given a run allowed 4 step attempts: the map step itself and three items
    plan = definition("""  - id: each
    map:
      items: "input.items"
      concurrency: 1
      max_items: 10
      steps:
        - {id: rec, action: t.record, with: {label: "${{ item }}"}}
""", name="fan-steps")
    plan = plan.model_copy(update={"budget": plan.budget.model_copy(update={"max_steps": 4})}).with_digest()
    status = world.rt.run(plan, {"items": [f"a{i}" for i in range(6)]}, initiator=USER, until="final")
    run = world.rt.store.get_run(status.run.id)
    # Then the run counted 4 steps, three items ran, and the step failed with budget_exceeded
    assert run.state == "failed" and run.error_class == "budget_exceeded" and run.steps_executed == 4
    assert sorted(r[0] for r in world.rows("SELECT label FROM intervals")) == ["a0", "a1", "a2"]
    # and the parent's revision was never disturbed by its children's usage: its fan-out attempt decided once
    assert [a.state for a in world.rt.store.attempts(run.id)] == ["failed"]


def test_a_map_failing_beyond_its_tolerance_undoes_its_completed_items(world):
    # Given a map whose item step declares a compensation, the third item failing (nothing tolerated)
    plan = definition("""  - id: each
    map:
      items: "input.items"
      concurrency: 1
      max_items: 10
      steps:
        - id: rec
          action: t.record
          with: {label: "${{ item }}"}
          idempotency_key: "${{ run.id }}:rec:${{ index }}"
          compensate: {action: t.undo, with: {label: "${{ item }}"}, timeout: 10s}
          retry: {max_attempts: 1}
""", name="fan-saga")
    status = world.rt.run(plan, {"items": ["a0", "a1", "fail2", "a3"]}, initiator=USER, until="final")
    run = world.rt.store.get_run(status.run.id)
    # Then the step failed; the two completed items were undone, each once in its own child run
    assert run.state == "failed" and "item 2 failed" in run.error_message
    world.rt.drive(run.id, until="final")
    for kid in world.rt.store.children(run.id)[:2]:
        world.rt.drive(kid.id, until="final")
    assert sorted(label for label, _ in world.undone) == ["a0", "a1"]
    kids = world.rt.store.children(run.id)
    assert [k.state for k in kids] == ["cancelled", "cancelled", "failed", "cancelled"]
    assert all(key.endswith(":rec:compensate") for _, key in world.undone)
    steps = [[a.step_id for a in world.rt.store.attempts(k.id)] for k in kids[:2]]
    assert steps == [["rec", "rec@compensate"], ["rec", "rec@compensate"]]


def test_a_failing_parallel_branch_undoes_the_branches_that_completed(world):
    # Given a parallel whose first branch records (and declares how to undo it) and whose second fails once
    # the first has recorded
    import time

    @action("t.fail_after_left", registry=world.registry)
    def fail_after_left(ctx):
        end = time.monotonic() + 10
        while not world.rows("SELECT 1 FROM effects WHERE label = 'L'") and time.monotonic() < end:
            time.sleep(0.01)
        raise ValueError("the right branch fails")

    plan = definition("""  - id: both
    parallel:
      branches:
        - steps:
            - id: left
              action: t.record
              with: {label: "L"}
              compensate: {action: t.undo, with: {label: "L"}, timeout: 10s}
        - steps:
            - {id: right, action: t.fail_after_left, retry: {max_attempts: 1}}
""", name="fan-par-saga")
    status = world.rt.run(plan, {}, initiator=USER, until="final")
    # Then the step failed, and the completed branch was undone in its own child run
    assert status.state == "failed" and "branch 1 failed" in status.run.error_message
    kids = world.rt.store.children(status.run.id)
    world.rt.drive(kids[0].id, until="final")
    assert [label for label, _ in world.undone] == ["L"]
    assert [k.state for k in world.rt.store.children(status.run.id)] == ["cancelled", "failed"]


def test_the_run_deadline_mid_map_times_the_run_out_and_cancels_its_items(world, monkeypatch):
    # Given a run of at most 1 s whose map holds two items until released, three more pending
    plan = definition("""  - id: each
    map:
      items: "input.items"
      concurrency: 2
      max_items: 10
      steps:
        - {id: rec, action: t.record, with: {label: "${{ item }}"}}
""", name="fan-deadline")
    plan = plan.model_copy(update={"budget": plan.budget.model_copy(update={"max_runtime_ms": 1000})}).with_digest()
    run_id = world.rt.submit(plan, {"items": ["hold0", "hold1", "a2", "a3", "a4"]}, initiator=USER)
    # When it is driven past its deadline (the held items still running), then released
    status = world.rt.drive(run_id, until="final", timeout=5)
    world.release.set()
    # Then the run timed out, its pending items were cancelled and none of them ran
    assert status.state == "timed_out"
    kids = world.rt.store.children(run_id)
    assert [k.state for k in kids[2:]] == ["cancelled"] * 3
    # and the running items were stopped by the same deadline (it bounds every item's attempt too)
    assert all((k.state, k.error_class) in (("failed", "timeout"), ("cancelling", "cancelled"),
                                            ("cancelled", "cancelled")) for k in kids[:2])
    assert {r[0] for r in world.rows("SELECT label FROM intervals")} <= {"hold0", "hold1"}
