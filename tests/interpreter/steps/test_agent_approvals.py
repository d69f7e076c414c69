"""Agent tool calls that need a person: a durable approval gate bound to the exact call.

The scripted model and the test tools are those of ``test_agent_steps``; ``mail.send`` is irreversible,
``notes.add`` a write the step lists in ``agent.approval_required``.
"""

from __future__ import annotations

import pytest
import test_agent_steps
from interp_helpers import approval
from test_agent_steps import Call, ScriptedAgent, agent_step, attempt_of, run_plan

from sealflow.core.errors import StepError
from sealflow.dsl.plan import AgentPlan
from sealflow.store import InvalidOperation

world = test_agent_steps.world  # the test tools and their recorded effects (a fixture)


def gated_step(tools=("kb.search", "notes.add", "mail.send"), required=("notes.add",), **kw):
    step = agent_step(tools=tools, permissions=("kb:read", "notes:write", "mail:send"), max_steps=8)
    ag = step["agent"].model_dump()
    ag.update(approval_required=tuple(required), approval=approval(**kw))
    return {**step, "agent": AgentPlan(**ag)}


def test_an_approved_call_runs_once_with_its_idempotency_key_and_the_loop_completes(runtime, providers, world):
    # Given a model that proposes a note (which needs approval), then answers
    providers["m"] = model = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="refund"), {"answer": "noted"})
    status = run_plan(runtime, gated_step())
    # Then the run waits at a gate showing the exact call, bound by its hash, and nothing ran
    assert status.state == "waiting" and world["notes"] == []
    shown = status.waiting["show"]
    assert shown["tool"] == "notes.add" and shown["arguments"] == {"ticket_id": "tkt_1", "text": "refund"}
    assert shown["hash"].startswith("sha256:") and status.waiting["approvers"] == ["role:manager"]
    # When someone other than the initiator approves
    runtime.approve(status.run.id, actor="user:ben")
    status = runtime.drive(status.run.id)
    # Then the call ran once, with the key it would have had without the gate, and the loop completed
    assert status.state == "completed" and status.output == {"answer": "noted"}
    assert world["notes"] == [("tkt_1", "refund")] and len(world["keys"]) == 1
    assert world["keys"][0].endswith(":1") and ":tool:notes.add:" in world["keys"][0]
    assert model.requests[-1].transcript[-1]["status"] == "ok"
    data = attempt_of(status).data["agent"]
    assert data["calls"][0]["outcome"] == "ok" and data["calls"][0]["approved_by"] == ["user:ben"]
    assert status.run.tool_calls == 1 and status.run.tokens == 20


def test_a_rejected_call_is_told_to_the_model_which_answers_otherwise(runtime, providers, world):
    providers["m"] = model = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="refund"),
                                           Call("kb.search", query="refund policy"), {"answer": "searched instead"})
    status = run_plan(runtime, gated_step())
    runtime.reject(status.run.id, actor="user:ben", reason="no refunds by note")
    status = runtime.drive(status.run.id)
    # Then the note never ran, the model saw the rejection with its reason, and went on
    assert status.state == "completed" and status.output == {"answer": "searched instead"}
    assert world["notes"] == [] and world["searched"] == ["refund policy"]
    told = model.requests[1].transcript[-1]
    assert told["status"] == "refused" and told["error"]["class"] == "rejected"
    assert "no refunds by note" in told["error"]["message"]
    assert attempt_of(status).data["agent"]["calls"][0]["outcome"] == "rejected"


def test_a_different_call_after_an_approval_needs_a_new_approval(runtime, providers, world):
    providers["m"] = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="first"),
                                   Call("notes.add", ticket_id="tkt_1", text="changed"), {"answer": "done"})
    status = run_plan(runtime, gated_step())
    runtime.approve(status.run.id, actor="user:ben")
    status = runtime.drive(status.run.id)
    # Then the changed call waits for its own approval; only the approved one ran
    assert status.state == "waiting" and world["notes"] == [("tkt_1", "first")]
    assert status.waiting["show"]["arguments"]["text"] == "changed"
    runtime.approve(status.run.id, actor="user:cy")
    status = runtime.drive(status.run.id)
    assert status.state == "completed" and world["notes"] == [("tkt_1", "first"), ("tkt_1", "changed")]


def test_an_irreversible_tool_needs_approval_by_default(runtime, providers, world):
    providers["m"] = model = ScriptedAgent(Call("mail.send", to="a@example.com", body="hi"), {"answer": "sent"})
    status = run_plan(runtime, gated_step(required=()))
    assert "mail.send" in [t.name for t in model.requests[0].tools]
    assert status.state == "waiting" and status.waiting["show"]["tool"] == "mail.send" and world["sent"] == []
    runtime.approve(status.run.id, actor="user:ben")
    assert runtime.drive(status.run.id).state == "completed" and world["sent"] == [("a@example.com", "hi")]


def test_the_approval_timeout_fails_closed(runtime, providers, world, clock):
    providers["m"] = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="x"), {"answer": "never"})
    status = run_plan(runtime, gated_step(timeout_ms=60_000))
    clock.advance(61)
    status = runtime.drive(status.run.id)
    assert status.state == "failed" and status.error[0] == "policy_denied" and "timed out" in status.error[1]
    assert world["notes"] == [] and attempt_of(status).data["agent"]["calls"][0]["outcome"] == "approval_expired"
    with pytest.raises(InvalidOperation, match="no approval waiting"):
        runtime.approve(status.run.id, actor="user:ben")


def test_the_initiator_cannot_approve_the_agents_call(runtime, providers, world):
    providers["m"] = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="x"), {"answer": "ok"})
    status = run_plan(runtime, gated_step())
    with pytest.raises(StepError, match="separation of duties"):
        runtime.approve(status.run.id, actor="user:ana")
    assert runtime.status(status.run.id).state == "waiting" and world["notes"] == []


def test_a_quorum_needs_distinct_approvers_before_the_call_runs(runtime, providers, world):
    providers["m"] = ScriptedAgent(Call("notes.add", ticket_id="tkt_1", text="x"), {"answer": "ok"})
    status = run_plan(runtime, gated_step(quorum=2))
    assert runtime.approve(status.run.id, actor="user:ben").state == "waiting" and world["notes"] == []
    runtime.approve(status.run.id, actor="user:cy")
    assert runtime.drive(status.run.id).state == "completed" and world["notes"] == [("tkt_1", "x")]


def test_without_approvers_an_irreversible_tool_stays_refused(runtime, providers, world):
    providers["m"] = ScriptedAgent(Call("mail.send", to="a@example.com", body="hi"), {"answer": "sent"})
    status = run_plan(runtime, agent_step(tools=("mail.send",), permissions=("mail:send",)))
    assert status.state == "failed" and status.error[0] == "policy_denied" and world["sent"] == []
    assert "approvers" in status.error[1]
