"""Which earlier results a step's attempt reads (engine/reads.py): only those its step (or the workflow's
output) names, all of them when it names ``steps`` some other way (Given / When / Then)."""

from __future__ import annotations

import pytest
from interp_helpers import S, make_plan

from sealflow.engine.reads import named_results
from sealflow.execution.actions import action


def test_a_step_names_the_steps_its_templates_read_and_itself():
    # Given steps that read earlier results by name, dotted, optional and indexed
    plan = make_plan(
        S("a", "action", action="t.echo", args={"x": "${{ input.n }}"}),
        S("b", "action", action="t.echo", args={"x": "${{ steps.a.output.x }}", "y": "${{ steps?.c }}"}),
        S("c", "action", action="t.echo", args={"x": "${{ steps['a'].output }}", "y": '${{ steps["b"].status }}'}),
    )
    # When their names are asked / Then each names what it reads, and itself
    assert named_results(plan, plan.step("a")) == {"a"}
    assert named_results(plan, plan.step("c")) == {"a", "b", "c"}


def test_the_workflows_output_is_named_by_every_step():
    # Given a workflow whose output reads a step (any step may end the run and render it)
    plan = make_plan(S("a", "action", action="t.echo"), S("b", "action", action="t.echo"),
                     output="${{ steps.a.output }}")
    # Then every step names that step
    assert named_results(plan, plan.step("b")) == {"a", "b"}


@pytest.mark.parametrize("text", ["${{ steps[input.which].output }}", "${{ keys(steps) }}", "${{ steps }}"])
def test_steps_read_any_other_way_means_every_result(text):
    # Given a step that reads `steps` by a name computed at run time, or as a whole
    plan = make_plan(S("a", "action", action="t.echo"), S("b", "action", action="t.echo", args={"x": text}))
    # Then it may read any result: all are read
    assert named_results(plan, plan.step("b")) is None


def test_prose_and_argument_names_do_not_count():
    # Given a workflow's description and an argument's name that say "steps"
    plan = make_plan(S("a", "action", action="t.echo", args={"steps": "${{ input.n }}"}),
                     description="runs the steps")
    # Then they name nothing
    assert named_results(plan, plan.step("a")) == {"a"}


def test_an_attempt_reads_only_the_results_its_step_names(runtime, registry, monkeypatch):
    # Given a run of 30 steps where the last reads the first's output only
    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        return kw

    steps = [S(f"s{i}", "action", action="t.echo", args={"i": i}) for i in range(29)]
    steps.append(S("last", "action", action="t.echo", args={"first": "${{ steps.s0.output.i }}"}))
    plan = make_plan(*steps)
    reads: list = []
    store = runtime.store
    real = store.results

    def watched(run_id, only=None):
        got = real(run_id, only)
        reads.append((None if only is None else set(only), len(got)))
        return got

    monkeypatch.setattr(store, "results", watched)
    # When it runs
    status = runtime.run(plan, {}, initiator="user:ana")
    # Then the last step rendered the first's output, having read two results (its own slot and s0's), and
    # no attempt read every result
    assert status.state == "completed" and status.run.output is None
    assert runtime.store.results(status.run.id, ["last"])["last"][1] == '{"first":0}'
    assert ({"s0", "last"}, 1) in reads
    assert all(only is not None for only, _ in reads)


def test_an_attempt_whose_step_reads_steps_dynamically_reads_them_all(runtime, registry, monkeypatch):
    # Given a step that picks an earlier step by a name from the input
    @action("t.echo", registry=registry)
    def echo(ctx, **kw):
        return kw

    plan = make_plan(S("a", "action", action="t.echo", args={"v": 1}), S("b", "action", action="t.echo", args={"v": 2}),
                     S("pick", "action", action="t.echo", args={"got": "${{ steps[input.which].output.v }}"}))
    reads: list = []
    real = runtime.store.results
    monkeypatch.setattr(runtime.store, "results", lambda run_id, only=None: reads.append(only) or real(run_id, only))
    # When it runs
    status = runtime.run(plan, {"which": "b"}, initiator="user:ana")
    # Then it read every result, and found the one named at run time
    assert status.state == "completed"
    assert None in reads
    assert runtime.store.results(status.run.id)["pick"][1] == '{"got":2}'
