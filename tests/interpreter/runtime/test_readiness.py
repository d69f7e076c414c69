"""No dead ends (issue 14): a runtime that would execute a run's next steps but lacks what they need refuses an
operator's act *before* changing anything (service/readiness.py)."""

from __future__ import annotations

import random

import pytest
from interp_helpers import FakeProvider, S, approval, make_plan

from sealflow.dsl.plan import AiPlan
from sealflow.execution.actions import Registry, action
from sealflow.runtime.facade import Runtime
from sealflow.runtime.readiness import NotReady, plan_actions
from sealflow.store import InvalidOperation, open_store


def gated(step: dict):
    return make_plan(S("ask", "approval", approval=approval(approvers=("user:ben",))), step)


def other_process(runtime, registry=None, providers=None) -> Runtime:
    """A second process on the same store, with its own actions and models."""
    url = runtime.store.url if hasattr(runtime.store, "url") else runtime.store._url
    return Runtime(open_store(url, clock=runtime.clock), registry or Registry(), providers or {},
                   rng=random.Random(1), worker_timeout_ms=20)


def approvals_recorded(runtime, run_id: str) -> list:
    return [e for e in runtime.store.audit(run_id) if e.event == "approval_granted"]


def test_approving_where_the_next_action_is_unknown_refuses_and_records_nothing(runtime, registry):
    # Given a run waiting for user:ben before a custom action, and a runtime without that action
    status = runtime.run(gated(S("act", "action", action="custom.act")), {}, initiator="user:ana")
    assert status.state == "waiting"
    # When user:ben approves there
    with pytest.raises(NotReady) as refused:
        runtime.approve(status.run.id, actor="user:ben")
    # Then it is refused naming the action and how to load it, and nothing changed
    assert isinstance(refused.value, InvalidOperation)
    assert refused.value.lacks == [("action", "custom.act")] and "--actions MODULE" in refused.value.message
    assert "nothing was changed" in refused.value.message
    assert runtime.status(status.run.id).state == "waiting" and approvals_recorded(runtime, status.run.id) == []
    # And once the action is registered, the same approval goes through
    action("custom.act", registry=registry)(lambda ctx: {"ok": True})
    runtime.approve(status.run.id, actor="user:ben")
    assert runtime.drive(status.run.id).state == "completed"


def test_approving_where_the_next_model_is_not_configured_refuses(runtime, providers):
    # Given a run whose next step calls model "big", and a runtime that serves it only at submit
    providers["big"] = FakeProvider({"ok": True})
    plan = gated(S("think", "ai", ai=AiPlan(model="big", prompt_template="hi")))
    status = runtime.run(plan, {}, initiator="user:ana")
    del providers["big"]
    # When it is approved there
    with pytest.raises(NotReady) as refused:
        runtime.approve(status.run.id, actor="user:ben")
    # Then it says which model and where to define it
    assert refused.value.lacks == [("model", "big")] and "models:" in refused.value.message
    assert runtime.status(status.run.id).state == "waiting"


def test_the_actions_of_a_plan_include_compensations_and_agent_tools():
    plan = make_plan(S("a", "action", action="x.do", compensate={"action": "x.undo", "timeout_ms": 1000,
                                                                  "retry": {"max_attempts": 1}}))
    assert plan_actions(plan) == ["x.do", "x.undo"]


def test_a_step_whose_model_key_is_missing_here_is_left_and_readiness_names_the_secret(tmp_path, clock, monkeypatch):
    # Given a runtime whose configuration names model "gpt" with an API key secret this process does not hold
    from sealflow.runtime.config import RuntimeConfig
    from sealflow.runtime.readiness import missing_secrets

    monkeypatch.delenv("SEALFLOW_SECRET_RDY_KEY", raising=False)
    config = RuntimeConfig.from_dict({"models": {"gpt": {"provider": "openai", "model": "gpt-4o-mini",
                                                         "api_key": {"secret": "RDY_KEY"}}}}, source="rt.yaml")
    rt = Runtime(open_store(f"sqlite:///{tmp_path}/k.db", clock=clock), Registry(), None, config=config,
                 worker_timeout_ms=20)
    try:
        # Then readiness names the secret and where it is referenced
        assert missing_secrets(rt) == [("RDY_KEY", "api_key of model 'gpt' in rt.yaml")]
        # And When a run calls that model here, Then its step is left as it was, naming the secret
        status = rt.run(make_plan(S("think", "ai", ai=AiPlan(model="gpt", prompt_template="hi"))), {},
                        initiator="user:ana")
        assert status.state == "queued" and [a.state for a in status.attempts] == ["scheduled"]
        assert status.waiting["lacks"] == [["secret", "RDY_KEY"]] and rt.store.dead_letters() == []
    finally:
        rt.close()
        rt.store.close()


def test_given_actions_and_models_inside_fan_out_sub_flows_then_readiness_names_them():
    # Given a plan whose only action and model run inside a map and a parallel branch
    from sealflow.dsl.api import check_bytes
    from sealflow.runtime.readiness import plan_models

    text = b"""sealflow: 1
name: fan
version: 1
owner: team:t
steps:
  - id: each
    map:
      items: "[1]"
      concurrency: 1
      max_items: 1
      steps: [{id: call, action: x.do}]
  - id: both
    parallel:
      branches:
        - steps: [{id: ask, ai: {model: m1, prompt: {template: hi}}}]
        - steps: [{id: other, set: {v: "1"}}]
"""
    plan = check_bytes(text, "fan.yaml").plan
    assert plan is not None
    # Then what a process must have to continue such a run includes them
    assert plan_actions(plan) == ["x.do"] and plan_models(plan) == ["m1"]
