"""Agent tool calls that need a person: a durable approval gate bound to one exact call.

A tool needs approval when the step lists it in ``agent.approval_required``, and always
when its action is ``irreversible`` (without ``agent.approval`` or top-level
``approvals`` approvers an irreversible tool stays refused, as before). When the model
proposes such a call and it passes every check of :mod:`.loop` (shape, allow-list,
permissions, arguments, budget), nothing runs: the attempt ends ``waiting`` on an
``approval_timeout`` timer, with the gate's data as an approval step's
(:func:`sealflow.policy.approvals.opening`): approvers, quorum, separation of
duties, and ``show`` = ``{tool, arguments, hash}``, bound by its sha256 (``show_hash``)
and the plan digest. Approving and rejecting go through the same
:mod:`sealflow.policy.approvals` checks as any gate.

The conversation so far (transcript, counters, idempotency state) waits in the attempt's
data under :data:`RESUME`. A decision ends the waiting attempt and starts a new attempt of
the step (:func:`sealflow.engine.decide.decide`) that continues it:

* **approved**: the approved call runs first, once, with the idempotency key it would have
  had without the gate, then the loop goes on;
* **rejected**: the model is told (a ``rejected`` turn with the reason) and may propose
  something else;
* **timeout**: fails closed: the step fails with ``policy_denied`` (``on_error`` may route it).

Every call that needs approval opens its own gate: an approval covers one call, so a changed
(or repeated) call needs a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sealflow.core.outcomes import Failed, Waiting
from sealflow.dsl.durations import format_ms
from sealflow.policy.approvals import show_hash
from sealflow.steps.agent.conversation import Conversation, Tool
from sealflow.steps.sections import section

if TYPE_CHECKING:
    from sealflow.dsl.plan import AgentPlan

#: the attempt-data key holding the waiting conversation (read by engine.decide)
RESUME = "agent_resume"
_STATE = ("transcript", "calls", "tokens", "cost", "tool_calls", "turns", "refusals", "in_a_row", "seen",
          "base_key", "model", "billed")


def needs_approval(agent: AgentPlan, name: str, effect: str) -> bool:
    return name in agent.approval_required or effect == "irreversible"


def call_hash(name: str, arguments: dict[str, Any]) -> str:
    """What an approval of this call binds to: the sha256 of the canonical ``{tool, arguments}``."""
    return show_hash({"tool": name, "arguments": arguments})


def open_gate(loop: Conversation, tool: Tool, arguments: dict[str, Any], entry: dict[str, Any],
              turn: dict[str, Any]) -> Waiting:
    """End the attempt waiting for a person to decide ``tool(**arguments)``."""
    x, ap = loop.x, section(loop.x, loop.agent.approval, "agent.approval")
    shown = {"tool": tool.name, "arguments": arguments, "hash": call_hash(tool.name, arguments)}
    entry["outcome"] = "awaiting_approval"
    state = {k: getattr(loop, k) for k in _STATE}
    state["pending"] = {"tool": tool.name, "arguments": arguments, "hash": shown["hash"], "turn": turn}
    data = {"opened_at": x.now, "approvers": list(ap.approvers), "quorum": ap.quorum, "show": shown,
            "show_hash": show_hash(shown), "plan_digest": x.run.plan_digest,
            "separation_of_duties": ap.separation_of_duties, "approvals": [], "gate_for": None,
            "tool_call": entry["n"], RESUME: state}
    return Waiting(x.now + ap.timeout_ms / 1000.0, "approval_timeout", data)


def timed_out(loop: Conversation) -> Failed:
    """No quorum in time: the call is not run and the step fails closed."""
    data, ap = loop.x.attempt.data, loop.agent.approval
    restore(loop, data.get(RESUME) or {})
    after = format_ms(ap.timeout_ms) if ap is not None else "its timeout"
    pending = (data.get(RESUME) or {}).get("pending") or {}
    for entry in loop.calls[-1:]:
        entry["outcome"] = "approval_expired"
    failed = loop.fail("policy_denied", f"the approval of the agent's call to {pending.get('tool')!r} timed out "
                                        f"after {after} with {len(data.get('approvals', ()))} of "
                                        f"{data.get('quorum')} approvals; the call was not run (fails closed)")
    failed.detail = {**(failed.detail or {}), "decision": "approval_expired", "show_hash": data.get("show_hash"),
                     "plan_digest": data.get("plan_digest")}
    return failed


def restore(loop: Conversation, state: dict[str, Any]) -> None:
    for k in _STATE:
        if k in state:
            setattr(loop, k, state[k])


def resume(loop: Conversation, state: dict[str, Any]) -> Failed | None:
    """Continue a conversation after a person decided its pending call: run it if approved (after checking
    it is the call that was approved), else tell the model it was rejected."""
    restore(loop, state)
    pending, decision = state.get("pending") or {}, state.get("decision") or {}
    name, arguments, turn = pending.get("tool"), pending.get("arguments"), dict(pending.get("turn") or {})
    entry: dict[str, Any] = loop.calls[-1] if loop.calls else {"n": 0}
    if not decision.get("approved"):
        entry["outcome"] = "rejected"
        loop.refusals += 1
        turn.update(status="refused", error={"class": "rejected", "message": "a person rejected this call ("
                                             + str(decision.get("reason") or "no reason given")
                                             + "); it was not run: propose something else or answer"})
        loop.transcript.append(turn)
        return None
    tool = loop.tools.get(name) if isinstance(name, str) else None
    if tool is None or not isinstance(name, str) or not isinstance(arguments, dict) \
            or call_hash(name, arguments) != pending.get("hash"):
        entry["outcome"] = "denied:approval_mismatch"
        return loop.fail("policy_denied", "the approved tool call is not the call waiting to run; nothing was run")
    entry["approved_by"] = list(decision.get("by") or ())
    return loop.execute(tool, arguments, entry, turn)
