"""What a reviewer needs to judge an approval gate, beyond what it shows: what the model steps before it proposed
(their answers, redacted and bounded, and the reasons they gave), the checks those answers passed, the step
that runs once it is approved and its arguments (rendered from what the run holds now; for a
``requires_approval_if`` gate, the gate's payload is the gated step's rendered arguments), the rule that asked for
the approval, who approved and how many more must, and the time left.

Given only to a principal who may decide the gate now (:meth:`Reviewing.approvals_to_review` starts from
:func:`~sealflow.runtime.approvals.waiting_for`): what the model proposed is what it is asked to judge, even
without ``runs:read`` on the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sealflow.core.ids import split_step_id
from sealflow.core.redaction import REDACTOR
from sealflow.dsl.errors import DslError
from sealflow.dsl.expressions import templates
from sealflow.dsl.plan import END
from sealflow.execution.context import expression_context
from sealflow.runtime.stepview import bounded, reader_detail
from sealflow.store.errors import PlanTampered

if TYPE_CHECKING:
    from sealflow.core.clock import Clock
    from sealflow.dsl.plan import Plan, PlanStep
    from sealflow.engine.engine import Engine
    from sealflow.store.base import Store
    from sealflow.store.records import AttemptRecord

#: the keys of a model's answer read as the reasons it gave
REASON_KEYS = ("reason", "reasons", "rationale", "why", "explanation", "justification")
#: model steps shown per gate (the latest before it)
MAX_PROPOSALS = 5


def reasons_in(answer: Any) -> list[str]:
    """The reasons a model's answer gives: the values of its :data:`REASON_KEYS` (at its top level)."""
    if not isinstance(answer, dict):
        return []
    out: list[str] = []
    for key in REASON_KEYS:
        value = answer.get(key)
        if isinstance(value, str) and value.strip():
            out.append(value)
        elif isinstance(value, list):
            out.extend(str(v) for v in value if v not in (None, ""))
    return out[:20]


def _validations(step: PlanStep, calls: list[dict[str, Any]]) -> list[str]:
    checks = []
    ai = step.ai or step.agent
    schema = getattr(ai, "output_schema", None)
    if schema is not None:
        checks.append("the answer matched the step's output schema")
    checks += [f"validate: {rule.check}" + (f" ({rule.message})" if rule.message else "") for rule in step.validations]
    if any(c.get("repair") for c in calls):
        checks.append("a first answer failed a check; the repair's answer passed")
    return checks


def _proposals(plan: Plan, attempts: list[AttemptRecord], detail: Any) -> list[dict[str, Any]]:
    latest: dict[str, AttemptRecord] = {}
    for a in attempts:
        latest[a.step_id] = a
    out = []
    for step_id, a in latest.items():
        base, gate = split_step_id(step_id)
        if gate or a.state != "succeeded":
            continue
        try:
            step = plan.step(base)
        except KeyError:
            continue
        model_step = step.ai or step.agent
        if model_step is None:
            continue
        calls = detail.calls.get(step_id, [])
        answer, cut = bounded(a.output)
        out.append({"step": step_id, "kind": str(step.kind),
                    "model": (calls[-1].get("answered_by") if calls else None) or model_step.model,
                    "answer": answer, "answer_truncated": cut, "reasons": reasons_in(answer),
                    "validations": _validations(step, calls)})
    return out[-MAX_PROPOSALS:]


def _will_run(plan: Plan, gate: dict[str, Any], then: str | None,
              render: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the step that runs once approved, with its arguments rendered by ``render`` from what the run holds now
    (as the workflow writes them when they cannot be: ``rendered`` False); the rule that asked for the
    approval). ``then``: where a ``requires_approval_if`` gate goes once approved."""
    base, is_gate = split_step_id(gate["step"])
    step = plan.step(base)
    if step.agent is not None and not is_gate:  # an agent's tool call: the exact call, fixed when proposed
        return ({"step": base, "kind": "agent tool call", "action": None, "args": gate.get("show"), "rendered": True},
                {"kind": "agent_tool_approval", "step": base, "condition": None})
    if is_gate:  # requires_approval_if: the step ran; its output made the condition hold; the next step waits
        rule: dict[str, Any] = {"kind": "requires_approval_if", "step": base, "condition": step.requires_approval_if}
        nxt = then
    else:
        rule = {"kind": "approval_step", "step": base, "show": step.approval.show if step.approval else None}
        nxt = step.next
    if nxt is None or nxt == END:
        return None, rule
    after = plan.step(nxt)
    try:
        args, rendered = render(dict(after.args)), True
    except DslError:  # (an expression that cannot be evaluated before the step runs: shown as written)
        args, rendered = dict(after.args), False
    return ({"step": after.id, "kind": str(after.kind), "action": after.action, "args": REDACTOR.value(args),
             "rendered": rendered}, rule)


class Reviewing:
    """A method of :class:`~sealflow.runtime.facade.Runtime` (see this module)."""

    if TYPE_CHECKING:
        store: Store
        engine: Engine
        clock: Clock

        def approvals_waiting(self, principal: str, tenant: str) -> list[dict[str, Any]]: ...

    def _renderer(self, run_id: str) -> Callable[[dict[str, Any]], Any]:
        """Render a step's arguments from what run ``run_id`` holds now (its input, its steps' outputs), as the
        step would render them if it ran now."""
        context = expression_context(self.store.get_run(run_id), self.store.results(run_id))
        return lambda args: templates.render_value(args, context, clock=self.clock.now)

    def approvals_to_review(self, principal: str, tenant: str) -> list[dict[str, Any]]:
        """The gates ``principal`` may decide now (as :meth:`approvals_waiting`), each with ``review``: the
        proposals of the run's model steps, the step and arguments that run once approved (``will_run``), the
        ``rule`` that asked, who approved (``approved_by``), how many more must (``still_needed``) and the
        seconds left (``time_left_s``)."""
        now = self.clock.now()
        out = []
        for gate in self.approvals_waiting(principal, tenant):
            attempts = self.store.attempts(gate["run_id"])
            active = next((a for a in reversed(attempts) if a.step_id == gate["step"]), None)
            given = [{"actor": a.get("actor"), "as": a.get("as")}
                     for a in ((active.data or {}).get("approvals", ()) if active is not None else ())]
            review: dict[str, Any] = {
                "approved_by": given, "still_needed": max(0, int(gate.get("quorum") or 1) - len(given)),
                "time_left_s": None if gate.get("due_at") is None else max(0.0, gate["due_at"] - now)}
            try:
                plan = self.engine.plan(self.store.get_run(gate["run_id"]).plan_digest)
            except PlanTampered:  # (deciding it is refused; nothing of that plan is shown)
                review["plan_note"] = "the run's stored plan does not match its digest"
            else:
                review["proposals"] = _proposals(plan, attempts, reader_detail(self.store, gate["run_id"]))
                try:
                    then = (active.data or {}).get("then") if active is not None else None
                    review["will_run"], review["rule"] = _will_run(plan, gate, then, self._renderer(gate["run_id"]))
                except KeyError:  # (a step the plan does not name: shown without it)
                    review["will_run"], review["rule"] = None, None
            out.append(dict(gate, review=review))
        return out
