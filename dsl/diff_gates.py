"""Which approval gates a step is behind: the gates passed, *approved*, on every path from the start to it.

The security diff compares these sets between two plans. A new ``switch`` case, ``on_error`` route,
``next:`` or ``on_timeout`` that reaches an effect step around a gate, a ``when:`` that lets the gate be
skipped, or a new step reusing an action ahead of the gate, all show up as a gate missing from the set.

Leaving an approval step by its ``next`` edge means it was approved; leaving it by a ``skip`` (its
``when`` was false), ``timeout`` (``on_timeout: <step>``) or ``error`` edge does not count as passing it.
"""

from __future__ import annotations

from sealflow.dsl.kinds import traits_of
from sealflow.dsl.plan import END, Plan, PlanStep


def gates_before(plan: Plan) -> dict[str, frozenset[str]]:
    """Step id -> ids of the approval steps approved on every path from the start to it (reachable steps).
    A step inside a fan-out sub-flow is behind the gates before its fan-out step and those of its sub-flow."""
    result = _flow_gates(plan.steps, plan.start)
    for s in plan.steps:
        if s.id not in result:
            continue
        for _, sub, start in s.subflows():
            result.update({sid: result[s.id] | gates for sid, gates in _flow_gates(sub, start).items()})
    return result


def _flow_gates(flow: tuple[PlanStep, ...], start: str) -> dict[str, frozenset[str]]:
    steps = {s.id: s for s in flow}
    everything = frozenset(s.id for s in flow if s.approval is not None)
    before: dict[str, frozenset[str]] = {sid: everything for sid in steps}
    if start not in steps:
        return {}
    before[start] = frozenset()
    reached = {start}
    work = [start]
    while work:
        sid = work.pop()
        step = steps[sid]
        for edge in step.edges:
            if edge.target == END or edge.target not in steps:
                continue
            passed = before[sid] | {sid} if (step.approval is not None and edge.kind == "next") else before[sid]
            target = edge.target
            merged = passed if target not in reached else before[target] & passed
            if target == start:
                merged = frozenset()
            if target not in reached or merged != before[target]:
                reached.add(target)
                before[target] = merged
                work.append(target)
    return {sid: gates for sid, gates in before.items() if sid in reached}


def effect_of(action: str | None, *plans: Plan) -> str | None:
    """The effect of ``action`` from the action metadata of any of ``plans`` (None: not known)."""
    if action is None:
        return None
    for plan in plans:
        meta = plan.actions.get(action)
        if meta is not None:
            return meta.effect
    return None


def sensitive(step: PlanStep, *plans: Plan) -> tuple[bool, str]:
    """Whether the step may write or act irreversibly, and the effect as words (``unknown`` without metadata)."""
    if not traits_of(step.kind).has_effect:
        return False, step.kind
    if step.kind == "action":
        effect = effect_of(step.action, *plans)
        if effect is None:
            return True, "effect unknown"
        return effect in ("write", "irreversible"), effect
    if step.kind == "agent" and step.agent is not None:
        effects = [effect_of(tool, *plans) for tool in step.agent.tools]
        effects += [t.effect for t in step.agent.mcp_tools or ()]  # as the definition declares them
        if any(e is None for e in effects):
            return True, "agent with tools of unknown effect"
        worst = "irreversible" if "irreversible" in effects else ("write" if "write" in effects else "read")
        return worst != "read", f"agent with {worst} tools"
    return False, step.kind


__all__ = ["gates_before", "effect_of", "sensitive"]
