"""A field this build cannot enforce is refused at submit, naming it; nothing is created."""

from __future__ import annotations

import pytest
from interp_helpers import S, make_plan

from sealflow.core.errors import StepError


@pytest.mark.parametrize("spec, named", [({"lock": "res-1"}, "step 'a' declares lock:"),
                                         ({"concurrency": "pool"}, "step 'a' declares concurrency:")])
def test_given_a_field_a_build_cannot_enforce_when_submitted_then_it_is_refused(runtime, spec, named, monkeypatch):
    # Given a build that could not enforce locks or pools (every control is enforced today: the mechanism is
    # what is tested, for the next field that lands in the language before its enforcement)
    from sealflow.runtime import honoured

    monkeypatch.setattr(honoured, "NOT_YET", {"step.lock": "locks are not enforced by this build",
                                              "step.concurrency": "pools are not enforced by this build"})
    plan = make_plan(S("a", "set", assign={"x": "1"}, **spec))
    # When it is submitted, then it is refused naming the field, and no run is created
    with pytest.raises(StepError, match=named) as refused:
        runtime.submit(plan, {}, initiator="user:t")
    assert refused.value.error_class == "configuration" and "cannot enforce" in refused.value.message
    assert runtime.store.active_runs() == []


def test_given_this_build_then_no_declared_control_is_refused(runtime):
    # Given a plan with a lock and a pool, when submitted, then it is accepted: both are enforced
    plan = make_plan(S("a", "set", assign={"x": "1"}, lock="res-1", concurrency="pool"))
    assert runtime.submit(plan, {}, initiator="user:t")


def test_given_a_definition_that_fans_out_when_run_then_it_is_accepted_and_runs(runtime):
    # Given a compiled definition with a map and a parallel after it (this build runs fan-out: child runs)
    from sealflow.dsl.api import check_bytes

    text = b"""sealflow: 1
name: fan
version: 1
owner: team:t
steps:
  - id: each
    map:
      items: "[1, 2]"
      concurrency: 2
      max_items: 10
      steps: [{id: double, set: {v: "item * 2"}}]
  - id: both
    parallel:
      branches:
        - steps: [{id: left, set: {v: "1"}}]
        - steps: [{id: right, set: {v: "2"}}]
"""
    plan = check_bytes(text, "fan.yaml").plan
    assert plan is not None
    # When it is run, then it completes: each fan-out's output lists its children's outputs in order
    status = runtime.run(plan, {}, initiator="user:t")
    assert status.run.state == "completed"
    results = runtime.store.results(status.run.id)
    assert results["each"][1] == '[{"v":2},{"v":4}]'
    assert results["both"][1] == '[{"v":1},{"v":2}]'
