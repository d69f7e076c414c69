"""A field this build cannot enforce is refused at submit, naming it; nothing is created."""

from __future__ import annotations

import pytest
from interp_helpers import S, make_plan

from sealflow.interpreter.core.errors import StepError


@pytest.mark.parametrize("spec, named", [({"lock": "res-1"}, "step 'a' declares lock:"),
                                         ({"concurrency": "pool"}, "step 'a' declares concurrency:")])
def test_given_a_field_this_build_cannot_enforce_when_submitted_then_it_is_refused(runtime, spec, named):
    # Given a plan declaring a lock or a pool this build does not enforce
    plan = make_plan(S("a", "set", assign={"x": "1"}, **spec))
    # When it is submitted, then it is refused naming the field, and no run is created
    with pytest.raises(StepError, match=named) as refused:
        runtime.submit(plan, {}, initiator="user:t")
    assert refused.value.error_class == "configuration" and "cannot enforce" in refused.value.message
    assert runtime.store.active_runs() == []
