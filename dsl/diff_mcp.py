"""Security-diff findings for an agent's MCP tools (D636, issue 36): a tool added, or what was pinned of it
changed (its description, input or output schema: a re-lock after the server changed it), or its declared
effect or permissions changed. Each needs a security reviewer: the tool's contract with the model is what
was reviewed, and a changed description or schema is how a server pulls the rug or poisons the tool."""

from __future__ import annotations

from typing import Any

from sealflow.dsl.plan import McpToolPlan, PlanStep

#: the finding (dsl/codes.py)
CODE = "D636"
PINNED = (("description", "description_digest"), ("input schema", "input_schema_digest"),
          ("output schema", "output_schema_digest"))


def _tools(step: PlanStep | None) -> dict[str, McpToolPlan]:
    agent = step.agent if step is not None else None
    return {} if agent is None else {f"{t.server}/{t.tool}": t for t in agent.mcp_tools or ()}


def mcp_changes(d: Any, os_: PlanStep | None, ns: PlanStep) -> None:
    """D636 for each MCP tool of ``ns`` that is new, or whose pinned digests, effect or permissions changed."""
    old, new = _tools(os_), _tools(ns)
    for index, (key, t) in enumerate(new.items()):
        at = d.sp(ns.id, "agent", "mcp_tools", index)
        before = old.get(key)
        if before is None:
            d.add(CODE, f"new MCP tool {key} (effect {t.effect}): the model may now call it", at, step=ns.id,
                  new=key)
            continue
        changed = [(what, getattr(before, field)[:19], getattr(t, field)[:19]) for what, field in PINNED
                   if getattr(before, field) != getattr(t, field)]
        if changed:
            d.add(CODE, f"MCP tool {key}: its pinned " + ", ".join(f"{w} changed ({a} -> {b})" for w, a, b in changed)
                  + " (sealflow.mcp.lock was written again: review what the server now tells the model)", at,
                  step=ns.id, old=[c[1] for c in changed], new=[c[2] for c in changed])
        if (before.effect, before.permissions) != (t.effect, t.permissions):
            d.add(CODE, f"MCP tool {key}: declared effect/permissions changed ({before.effect} "
                  f"{list(before.permissions)} -> {t.effect} {list(t.permissions)})", at, step=ns.id,
                  old=before.effect, new=t.effect)
