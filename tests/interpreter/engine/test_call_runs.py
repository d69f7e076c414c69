"""``call`` at run time, on every store: another workflow runs as the step's child run with its own input and
steps; its output is the step's; its failure is the step's with its class; the caller's budget bounds it;
cancelling the caller cancels it and undoes its completed steps; a trust-gated worker runs only the digest the
caller's plan pins. (Compile-time checks: tests/dsl/test_call.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fanout_helpers import serving, wait_for

from sealflow.core.states import RUN_FINAL
from sealflow.dsl.api import compile_file
from sealflow.store import NotFound

USER = "user:ana"

CHILD = """sealflow: 1
name: child
version: 1
owner: team:t
input:
  schema: {type: object, required: [label], properties: {label: {type: string}}, additionalProperties: false}
budget: {max_steps: 10}
steps:
  - id: first
    action: t.record
    with: {label: "${{ input.label }}-1"}
    idempotency_key: "${{ run.id }}:first"
    retry: {max_attempts: 1}
    compensate: {action: t.record, with: {label: "undo-${{ input.label }}"}}
  - id: second
    action: t.record
    with: {label: "${{ input.label }}"}
    idempotency_key: "${{ run.id }}:second"
    retry: {max_attempts: 1}
output: {said: "${{ steps.second.output }}"}
"""

PARENT = """sealflow: 1
name: parent
version: 1
owner: team:t
{budget}steps:
  - id: first
    set: {{label: "input.label"}}
  - id: call
    call: {{workflow: child, version: 1, input: {{label: "${{{{ steps.first.output.label }}}}"}}}}
{route}  - id: after
    set: {{got: "steps.call.output.said"}}
"""


def parent_plan(tmp_path: Path, *, budget: str = "", route: str = "", child: str = CHILD):
    folder = tmp_path / "defs"
    folder.mkdir(exist_ok=True)
    (folder / "child.v1.yaml").write_text(child)
    (folder / "parent.v1.yaml").write_text(PARENT.format(budget=budget, route=route))
    return compile_file(folder / "parent.v1.yaml")


def result(rt, run_id: str, step: str):
    status, out = rt.store.results(run_id)[step]
    return status, None if out is None else json.loads(out)


def test_the_called_workflow_runs_as_a_child_with_its_own_input_and_its_output_is_the_steps(world, tmp_path):
    # Given a parent that calls child v1 with a label taken from its own step
    plan = parent_plan(tmp_path)
    # When it runs
    status = world.rt.run(plan, {"label": "a"}, initiator=USER, until="final")
    # Then it completed; the call step's output is the child's declared output, and the next step read it
    assert status.run.state == "completed", status.run.error_message
    assert result(world.rt, status.run.id, "call") == ("succeeded", {"said": "done:a"})
    assert result(world.rt, status.run.id, "after") == ("succeeded", {"got": "done:a"})
    # and the child is a run of child v1 with its own input (not the parent's), in the parent's tenant
    [kid] = world.rt.store.children(status.run.id)
    child = world.rt.store.get_run(kid.id)
    assert (child.workflow, child.workflow_version, child.input, child.called) == ("child", 1, {"label": "a"}, True)
    assert child.tenant == status.run.tenant and child.initiator == USER
    # and its steps ran once each; the parent's counters hold the child's steps too
    assert sorted(r[0] for r in world.rows("SELECT label FROM intervals")) == ["a", "a-1"]
    assert world.rt.store.get_run(status.run.id).steps_executed >= 2 + 3


def test_a_failing_child_fails_the_step_with_its_class_and_the_route_is_taken(world, tmp_path):
    # Given a parent whose call routes internal failures to its next step, and a child whose second step fails
    plan = parent_plan(tmp_path, route="    on_error: [{errors: [internal], next: after}]\n")
    # When it runs with a label the child's action fails on
    status = world.rt.run(plan, {"label": "fail"}, initiator=USER, until="final")
    # Then the call step failed with the child's error class, naming the child run, and the route was taken
    call_status, _ = result(world.rt, status.run.id, "call")
    assert call_status == "failed"
    [kid] = world.rt.store.children(status.run.id)
    assert kid.state == "failed" and kid.error_class == "internal"
    att = [a for a in world.rt.store.attempts(status.run.id) if a.step_id == "call"][-1]
    assert att.error_class == "internal" and kid.id in (att.error_message or "")
    assert status.run.state == "completed"


def test_without_a_route_the_childs_failure_fails_the_run_and_only_the_parent_is_dead_lettered(world, tmp_path):
    # Given a parent with no route for the call
    plan = parent_plan(tmp_path)
    # When the child fails
    status = world.rt.run(plan, {"label": "fail"}, initiator=USER, until="final")
    # Then the run failed with the child's class, and the dead-letter list holds the parent, not the child
    assert status.run.state == "failed" and status.run.error_class == "internal"
    assert [d.run_id for d in world.rt.store.dead_letters()] == [status.run.id]


def test_an_input_that_breaks_the_called_workflows_schema_fails_the_step_before_any_child(world, tmp_path):
    # Given a parent passing a number where the child's schema wants a string
    plan = parent_plan(tmp_path)
    # When it runs
    status = world.rt.run(plan, {"label": 7}, initiator=USER, until="final")
    # Then the call failed as invalid_request, saying where, and no child run exists
    assert status.run.state == "failed" and status.run.error_class == "invalid_request"
    assert "input schema" in status.run.error_message and "label" in status.run.error_message
    assert world.rt.store.children(status.run.id) == []


def test_the_callers_budget_bounds_the_childs_steps(world, tmp_path):
    # Given a caller allowing 3 step attempts in all, and a child of 2 steps (itself allowing 10)
    plan = parent_plan(tmp_path, budget="budget: {max_steps: 3}\n")
    # When it runs: first (1), the call (2), the child's first step (3), then the child's second
    status = world.rt.run(plan, {"label": "b"}, initiator=USER, until="final")
    # Then the child stopped with budget_exceeded naming its caller, and so did the caller
    [kid] = world.rt.store.children(status.run.id)
    assert kid.error_class == "budget_exceeded" and status.run.id in (kid.error_message or "")
    assert status.run.state == "failed" and status.run.error_class == "budget_exceeded"
    # and the child's one completed step was undone as it failed (a child's saga is its own)
    assert [r[0] for r in world.rows("SELECT label FROM intervals")] == ["b-1", "undo-b"]


def test_cancelling_the_caller_cancels_the_child_and_undoes_its_completed_steps(world, tmp_path):
    # Given a worker, and a parent whose child's first step holds until released (labels "hold..." hold)
    plan = parent_plan(tmp_path)
    with serving(world) as w:
        rt = w.rt
        run_id = rt.submit(plan, {"label": "hold"}, initiator=USER)
        wait_for(lambda: "hold-1" in w.started)
        [kid] = rt.store.children(run_id)
        # When the caller is cancelled, then the held action is released
        rt.cancel(run_id, actor=USER)
        w.release.set()
        wait_for(lambda: rt.store.get_run(kid.id).state in RUN_FINAL and
                 rt.store.get_run(run_id).state in RUN_FINAL)
        # Then the child ended cancelled, its first step (completed as it was released) undone by its compensation,
        # and its second step never started
        assert rt.store.get_run(kid.id).state == "cancelled"
        assert rt.store.get_run(run_id).state == "cancelled"
        assert sorted(r[0] for r in w.rows("SELECT label FROM intervals")) == ["hold-1", "undo-hold"]


def test_a_trust_gated_worker_runs_only_the_child_its_caller_pins(gated, tmp_path, monkeypatch):
    # Given a trust-gated worker and a caller: the pinned child runs
    from sealflow.steps import call

    plan = parent_plan(tmp_path)
    assert gated.rt.run(plan, {"label": "c"}, initiator=USER, until="final").state == "completed"
    # When the call starts another plan than the one it pins (a forged child recording "forged")
    forged = plan.step("call").call.plan
    steps = tuple(s.model_copy(update={"args": {"label": "forged"}}) for s in forged.steps)
    forged = forged.model_copy(update={"steps": steps}).with_digest()
    real = call.start

    def forging(x):
        swapped = x.step.call.model_copy(update={"plan": forged, "digest": forged.digest})
        x.step = x.step.model_copy(update={"call": swapped})
        return real(x)

    monkeypatch.setattr(call, "start", forging)
    status = gated.rt.run(plan, {"label": "d"}, initiator=USER, until="final")
    # Then the child was refused as unauthorized before any step of it ran, and so the call failed
    assert status.state == "failed" and status.run.error_class == "unauthorized"
    assert "forged" not in {r[0] for r in gated.rows("SELECT label FROM intervals")}


def test_a_redriven_caller_starts_a_new_child_that_replays_the_effects_keyed_on_its_input(world, tmp_path):
    # Given a child whose steps key their effects on its input (not on run.id), whose second step fails once
    from sealflow.execution.actions import action

    calls: list[str] = []

    @action("t.flaky", registry=world.registry)
    def flaky(ctx, label: str):
        calls.append(label)
        if label == "b" and calls.count("b") == 1:
            raise ValueError("b fails once")
        return f"ok:{label}"

    undo = "    compensate: {action: t.record, with: {label: \"undo-${{ input.label }}\"}}\n"
    child = CHILD.replace(undo, "").replace("action: t.record", "action: t.flaky").replace(
        '"${{ run.id }}:first"', '"child:${{ input.label }}:first"').replace(
        '"${{ run.id }}:second"', '"child:${{ input.label }}:second"')
    assert "compensate" not in child
    plan = parent_plan(tmp_path, child=child)
    # When it runs, the child fails, and so the caller fails into the dead letters
    failed = world.rt.run(plan, {"label": "b"}, initiator=USER, until="final")
    assert failed.run.state == "failed" and [d.run_id for d in world.rt.store.dead_letters()] == [failed.run.id]
    # When the caller is redriven
    world.rt.dlq_redrive(failed.run.id, actor=USER)
    done = world.rt.drive(failed.run.id, until="final")
    # Then it completes through a second child run, whose first step's effect came from the ledger (not run again)
    assert done.run.state == "completed", done.run.error_message
    kids = world.rt.store.children(failed.run.id)
    assert [k.state for k in kids] == ["failed", "completed"] and kids[1].id.endswith("~2")
    assert calls == ["b-1", "b", "b"]


def test_status_says_a_waiting_caller_waits_for_its_called_run_and_names_it(world, tmp_path):
    # Given a caller whose child waits at an approval gate
    from sealflow.runtime.status import run_status

    gate = "  - id: ask\n    approval: {approvers: [\"user:boss\"]}\n"
    child = CHILD.replace("  - id: second\n", gate + "  - id: second\n")
    plan = parent_plan(tmp_path, child=child)
    status = world.rt.run(plan, {"label": "w"}, initiator=USER, until="final")
    # When its status is read
    shown = run_status(world.rt.store, status.run.id)
    # Then it waits for the call, naming the workflow and the child run, which waits for its approval
    [kid] = world.rt.store.children(status.run.id)
    assert shown.waiting["kind"] == "call" and shown.waiting["workflow"] == "child"
    assert shown.waiting["child"] == kid.id and shown.waiting["child_state"] == "waiting"
    assert run_status(world.rt.store, kid.id).waiting["kind"] == "approval"
    # and the approver's list shows the child's gate with the run that called it
    [gate] = [g for g in world.rt.approvals_waiting("user:boss", "default") if g["run_id"] == kid.id]
    assert gate["called_by"] == {"run_id": status.run.id, "step": "call"} and gate["input"] == {"label": "w"}


def test_a_caller_whose_child_names_an_unconfigured_model_is_refused_at_submit(world, tmp_path):
    # Given a child with an ai step naming a model this runtime does not configure
    from sealflow.runtime.submitting import ModelNotConfigured

    child = CHILD.replace("  - id: second\n", "  - id: think\n    ai: {model: no-such-model, prompt: {template: hi}}\n"
                                               "  - id: second\n")
    plan = parent_plan(tmp_path, child=child)
    # When the caller is submitted, Then it is refused before any run exists, naming the model
    with pytest.raises(ModelNotConfigured, match="no-such-model"):
        world.rt.submit(plan, {"label": "m"}, initiator=USER)
    assert world.rt.store.list_runs() == []


GATED_CHILD = """sealflow: 1
name: child
version: 1
owner: team:t
steps:
  - id: ask
    approval: {approvers: [role:manager], timeout: 1h}
"""


def test_an_outsider_cannot_see_cancel_or_approve_a_called_run(rt, tmp_path):
    # Given (under the ACME policy) alice's caller whose called run waits at a manager's gate
    status = rt.run(parent_plan(tmp_path, child=GATED_CHILD), {"label": "x"}, initiator="user:alice", tenant="acme")
    [kid] = rt.store.children(status.run.id)
    # When eve of another tenant names the called run, Then there is no such run to read, cancel or approve
    for operation in (lambda: rt.status(kid.id, actor="user:eve"), lambda: rt.cancel(kid.id, actor="user:eve"),
                      lambda: rt.approve(kid.id, actor="user:eve")):
        with pytest.raises(NotFound):
            operation()
    assert rt.store.get_run(kid.id).state == "waiting"
    # and bob, a manager of acme, approves it; the caller then completes with the child's output
    rt.approve(kid.id, actor="user:bob", tenant="acme")
    assert rt.drive(status.run.id, until="final").state == "completed"


def test_cancelling_the_called_run_alone_fails_the_callers_step_with_cancelled(world, tmp_path):
    # Given a caller whose called run waits at a gate
    status = world.rt.run(parent_plan(tmp_path, child=GATED_CHILD.replace("[role:manager]", '["user:boss"]')),
                          {"label": "y"}, initiator=USER, until="final")
    [kid] = world.rt.store.children(status.run.id)
    # When the called run is cancelled by itself (not its caller)
    world.rt.cancel(kid.id, actor=USER)
    done = world.rt.drive(status.run.id, until="final")
    # Then the call step fails with the child's class, cancelled, and the caller fails with it (no route)
    assert world.rt.store.get_run(kid.id).state == "cancelled"
    assert done.run.state == "failed" and done.run.error_class == "cancelled", done.run.error_message
