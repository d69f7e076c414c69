"""A workflow bill of materials: what a verified, signed definition can touch, with digests.

Derived from the verified bytes, never a second document that could disagree with them: the plan compiled from
exactly the signed bytes (its digest covers every file it read: schemas and prompts are inlined, a called
workflow is pinned by its plan digest), the files the compile read (path, sha256, size), the workflows it calls
(each verified under the same trust policy, with their own bill), the actions its steps, compensations and agent
tools name (with the effect and permissions the action metadata declared at compile time, when known) and the
models it names. What only the running environment knows (the Python module and distribution version of each
action, the provider and model id behind each model name) is added by the command line
(:mod:`sealflow.cli.commands.trust`, ``sealflow verify --bom``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from sealflow.dsl.diff import uses


def bill_of_materials(verified: Any, files: dict[str, str] | None = None) -> dict[str, Any]:
    """The bill of ``verified`` (a :class:`sealflow.dsl.trust.Verified`); ``files``: the files its verification read
    (path relative to the repository root -> text, as :func:`sealflow.dsl.refs.recording` collects them)."""
    plan = verified.plan
    actions, models, tools = uses(plan)
    bill: dict[str, Any] = {
        "definition": {"name": verified.name, "version": verified.version, "digest": verified.digest,
                       "signer": verified.principal(), "signature_file": verified.signature_file},
        "permissions": list(plan.permissions),
        "actions": [_action(plan, name) for name in actions],
        "agent_tools": list(tools),
        "mcp_tools": _mcp_tools(plan),
        "models": list(models),
        "calls": [bill_of_materials(v, files) for v in verified.called],
    }
    if files is not None:
        bill["files"] = [{"path": path, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                          "bytes": len(text.encode())} for path, text in sorted(files.items())]
    return bill


def _mcp_tools(plan: Any) -> list[dict[str, Any]]:
    """Each MCP tool an agent may call, as pinned in ``sealflow.mcp.lock`` (its digests) and declared here."""
    seen: dict[str, dict[str, Any]] = {}
    for _, step in plan.all_steps():
        for t in (step.agent.mcp_tools or ()) if step.agent is not None else ():
            seen.setdefault(f"{t.server}/{t.tool}", {
                "tool": f"{t.server}/{t.tool}", "effect": t.effect, "permissions": list(t.permissions),
                "description_digest": t.description_digest, "input_schema_digest": t.input_schema_digest,
                "output_schema_digest": t.output_schema_digest})
    return list(seen.values())


def _action(plan: Any, name: str) -> dict[str, Any]:
    meta = plan.actions.get(name)
    if meta is None:  # compiled without the action's metadata: only its name is known here
        return {"name": name}
    return {"name": name, "effect": meta.effect, "permissions": list(meta.permissions)}
