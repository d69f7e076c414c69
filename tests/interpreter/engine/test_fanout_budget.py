"""A fan-out spends its run's budget, and undoes its completed items when it fails, on every store.

Each child run's usage (steps, tokens, cost, tool calls) is added to its parent run's counters in the child's
commit, so the run budget sees every item's calls: exhausted mid-map, the remaining items stop and the step fails
with ``budget_exceeded`` whatever ``tolerate_failures`` says. A map failing beyond its tolerance starts the
compensations of its completed items, each in its own child run (newest step first), one item at a time: newest
completed item first, across items (and branches), each next one started by the commit that ends the previous
one's undo, so a crash mid-undo resumes with the item being undone and never undoes one twice.
"""

from __future__ import annotations

import threading

import pytest
from fanout_helpers import World, definition, map_over, store_url, wait_for, world_runtime
from interp_helpers import BACKENDS, FakeProvider

from sealflow.execution.actions import action
from sealflow.runtime.facade import Runtime
from sealflow.store import open_store

USER = "user:ana"


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    return store_url(request, tmp_path)


@pytest.fixture
def world(url, tmp_path):
    w = World(str(tmp_path / "world.db"))
    w.model = FakeProvider("ok", tokens=10)
    w.undone = []

    w.busy = []  # per undo call: the sibling child runs compensating at that moment
    w.hang = None  # (label, entered, go): that label's first undo call holds until go is set
    w.broken = set()  # labels whose undo fails

    @action("t.undo", registry=w.registry)
    def undo(ctx, label: str):
        w.undone.append((label, ctx.idempotency_key))
        me = w.rt.store.get_run(ctx.run_id)
        if me.parent_run_id is not None:
            w.busy.append([k.id for k in w.rt.store.children(me.parent_run_id) if k.state == "compensating"])
        if label in w.broken:
            raise ValueError(f"cannot undo {label}")
        w.write(0.0, 0.0, label, ctx.idempotency_key)  # the effect, once per key at the receiver
        if w.hang is not None and w.hang[0] == label and [u for u, _ in w.undone].count(label) == 1:
            w.hang[1].set()
            w.hang[2].wait(30)  # the worker is "dead" here: a new runtime takes over
        return {"undone": label}

    @action("t.work", registry=w.registry)
    def work(ctx, label: str, after: int | None = None):
        """Completes only once sibling ``after`` has completed in the store: items complete in a chosen order."""
        if after is not None:
            parent = w.rt.store.get_run(ctx.run_id).parent_run_id
            wait_for(lambda: w.rt.store.children(parent)[after].state == "completed")
        if label.startswith("fail"):
            raise ValueError(f"{label} fails")
        return {"done": label}

    with world_runtime(w, url, {"fake": w.model}, threads=3):
        yield w


def test_a_run_budget_exhausted_mid_map_stops_the_items_and_fails_the_step(world):
    # Given a run budget of 45 tokens and a map of 8 items, one at a time, each a model call of up to 20 tokens
    # (10 used), tolerating every failure
    plan = map_over("""        - id: ask
          ai: {model: fake, prompt: {template: "say ${{ item }}"}, max_tokens: 20}
""", concurrency=1, tolerate=8, name="fan-budget")
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
    plan = map_over("""        - {id: rec, action: t.record, with: {label: "${{ item }}"}}
""", concurrency=1, name="fan-steps")
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
    plan = map_over("""        - id: rec
          action: t.record
          with: {label: "${{ item }}"}
          idempotency_key: "${{ run.id }}:rec:${{ index }}"
          compensate: {action: t.undo, with: {label: "${{ item }}"}, timeout: 10s}
          retry: {max_attempts: 1}
""", concurrency=1, name="fan-saga")
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
    plan = map_over("""        - {id: rec, action: t.record, with: {label: "${{ item }}"}}
""", concurrency=2, name="fan-deadline")
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
    assert all((k.state, k.error_class) in (("timed_out", "timeout"), ("cancelling", "cancelled"),
                                            ("cancelled", "cancelled")) for k in kids[:2])
    assert {r[0] for r in world.rows("SELECT label FROM intervals")} <= {"hold0", "hold1"}


# -- undoing, newest completed item first, across items ----------------------------------------------

#: three items complete in the order s1, s0, s2 (not their index order), then fail3 fails
ORDERED = [{"label": "s0", "after": 1}, {"label": "s1", "after": None}, {"label": "s2", "after": 0},
           {"label": "fail3", "after": 2}]
WORK = """action: t.work
          with: {{label: "${{{{ {v}.label }}}}", after: "${{{{ {v}.after }}}}"}}
          retry: {{max_attempts: 1}}
          compensate:
            action: t.undo
            with: {{label: "${{{{ {v}.label }}}}"}}
            timeout: 30s
            retry: {{max_attempts: 2, on: [worker_lost], backoff: {{initial: 1ms, jitter: none}}}}"""


def ordered_map():
    return definition(f"""  - id: each
    map:
      items: "input.items"
      concurrency: 4
      max_items: 10
      steps:
        - id: work
          {WORK.format(v="item")}
""", name="fan-undo-order")


def settle(rt, run_id: str) -> list:
    """Drive the run's children until none is completed (its undo queued) or compensating; their final states."""
    def undone() -> bool:
        for kid in rt.store.children(run_id):
            if kid.state in ("completed", "compensating"):
                rt.drive(kid.id, until="final", timeout=5)
        return all(k.state not in ("completed", "compensating") for k in rt.store.children(run_id))

    wait_for(undone, 60)
    return rt.store.children(run_id)


def test_a_failed_map_undoes_its_items_one_at_a_time_newest_completed_first(world):
    # Given a map whose items complete in the order s1, s0, s2, then the fourth fails (nothing tolerated)
    status = world.rt.run(ordered_map(), {"items": ORDERED}, initiator=USER, until="final")
    # When the step fails and its completed items are undone
    assert status.state == "failed" and "item 3 failed" in status.run.error_message
    kids = settle(world.rt, status.run.id)
    # Then the compensations ran in reverse completion order across items (s2, s0, s1: not reverse index order),
    # each once, and each while no other item of the step was compensating
    assert [label for label, _ in world.undone] == ["s2", "s0", "s1"]
    assert world.busy == [[kids[2].id], [kids[0].id], [kids[1].id]]
    assert [k.state for k in kids] == ["cancelled", "cancelled", "cancelled", "failed"]


def test_an_item_whose_undo_fails_is_quarantined_and_the_next_items_undo_still_starts(world):
    # Given a map whose items complete in the order s1, s0, s2, then the fourth fails, and s0 cannot be undone
    world.broken = {"s0"}
    status = world.rt.run(ordered_map(), {"items": ORDERED}, initiator=USER, until="final")
    # When its completed items are undone
    kids = settle(world.rt, status.run.id)
    # Then s0's failed undo quarantined that item alone, and s1 (older) was still undone after it
    assert [label for label, _ in world.undone] == ["s2", "s0", "s1"]
    assert [k.state for k in kids] == ["quarantined", "cancelled", "cancelled", "failed"]
    assert sorted(r[0] for r in world.rows("SELECT label FROM effects")) == ["s1", "s2"]


def test_a_failed_parallel_undoes_its_branches_newest_completed_first(world):
    # Given a parallel whose branches complete in the order p1, p0, then the third fails
    branch = "\n".join(f"""        - steps:
            - id: b{i}
              {WORK.format(v="input.b" + str(i)).replace(chr(10) + "          ", chr(10) + "              ")}"""
                       for i in range(3))
    plan = definition(f"""  - id: both
    parallel:
      branches:
{branch}
""", name="fan-par-undo-order")
    given = {"b0": {"label": "p0", "after": 1}, "b1": {"label": "p1", "after": None},
             "b2": {"label": "fail2", "after": 0}}
    status = world.rt.run(plan, given, initiator=USER, until="final")
    # When the step fails and its completed branches are undone
    assert status.state == "failed" and "branch 2 failed" in status.run.error_message
    kids = settle(world.rt, status.run.id)
    # Then the newest completed branch (p0) was undone first, then p1, one at a time
    assert [label for label, _ in world.undone] == ["p0", "p1"]
    assert world.busy == [[kids[0].id], [kids[1].id]]
    assert [k.state for k in kids] == ["cancelled", "cancelled", "failed"]


def test_a_crash_mid_undo_resumes_with_the_item_being_undone_and_undoes_each_once(world, url):
    # Given a failed map whose undo (s2, then s0, then s1) is in s0's compensation, applied at the receiver but
    # not committed, when its worker stops answering
    entered, go = threading.Event(), threading.Event()
    world.hang = ("s0", entered, go)
    run_id = world.rt.submit(ordered_map(), {"items": ORDERED}, initiator=USER)
    threading.Thread(target=world.rt.drive, args=(run_id,), kwargs={"until": "final", "timeout": 60},
                     daemon=True).start()
    wait_for(entered.is_set)
    kids = world.rt.store.children(run_id)
    assert [k.state for k in kids] == ["compensating", "completed", "cancelled", "failed"]
    # When its lease ends as if its worker had died, and a new runtime on the same store recovers the run
    world.rt.store.expire_leases(world.rt.owner, world.rt.clock.now())
    rt = Runtime(open_store(url), world.registry, {}, worker_threads=2, worker_timeout_ms=20)
    try:
        kids = settle(rt, run_id)
    finally:
        go.set()
        rt.close()
        rt.store.close()
    # Then s0's compensation ran again (a loss, not a failed try) and then s1's; s2's never again;
    # each item's undo took effect once at the receiver
    assert [label for label, _ in world.undone] == ["s2", "s0", "s0", "s1"]
    assert sorted(world.rows("SELECT label, COUNT(*) FROM effects GROUP BY label")) == [("s0", 1), ("s1", 1),
                                                                                         ("s2", 1)]
    assert [k.state for k in kids] == ["cancelled", "cancelled", "cancelled", "failed"]
    comps = [(a.state, a.leases_lost) for a in world.rt.store.attempts(kids[0].id) if a.step_id == "work@compensate"]
    assert comps == [("succeeded", 1)]
