"""Tools for agent steps: an action described to a model as a :class:`~.base.ToolSpec`.

The argument schema is the action's input schema, built from its Python signature and type hints
(:mod:`sealflow.execution.action_schema`, which the compiler's type checks read too).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from sealflow.core.outcomes import Failed
from sealflow.execution.action_schema import parameters_schema
from sealflow.execution.context import Execution
from sealflow.providers.base import ToolSpec
from sealflow.steps.agent.approval import needs_approval
from sealflow.steps.agent.conversation import Tool
from sealflow.steps.sections import section


def tool_spec(action: Any) -> ToolSpec:
    """The :class:`ToolSpec` of a registered action (name, docstring, argument schema)."""
    return ToolSpec(name=action.name, description=action.description or "", parameters=parameters_schema(action.fn))


# -- the step's tools ---------------------------------------------------------------------------------
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def safe_name(name: Any) -> str:
    """A tool name fit for the audit: an action-shaped name as is, anything else as a hash."""
    if isinstance(name, str) and len(name) <= 64 and _NAME.match(name):
        return name
    return f"invalid:{digest(name)}"


#: (action name, id of its function) -> (ToolSpec, argument validator); built once per process
_validators: dict[tuple[str, int], tuple[Any, Any]] = {}


def tools_for(x: Execution) -> dict[str, Tool] | Failed:
    """The step's allow-listed tools, or a ``configuration`` failure naming an unknown one."""
    held = set(x.step.permissions)
    out: dict[str, Tool] = {}
    agent = section(x, x.step.agent, "agent")
    for name in agent.tools:
        act = x.services.registry.get(name)
        if act is None:
            return Failed("configuration", f"agent tool {name!r} is not a registered action: load the module that "
                                           f"defines it (--actions pkg.module) or remove it from agent.tools")
        key = (name, id(act.fn))
        known = _validators.get(key)
        if known is None:
            import jsonschema

            spec = tool_spec(act)
            known = _validators[key] = (spec, jsonschema.Draft202012Validator(dict(spec.parameters)))
        spec, validator = known
        denied, gated = None, agent.approval is not None and needs_approval(agent, name, act.effect)
        if act.effect == "irreversible" and not gated:
            denied = "irreversible"
        elif not set(act.permissions) <= held:
            denied = "permissions"
        out[name] = Tool(name, act, spec, validator, denied, gated)
    if agent.mcp_tools:  # pinned MCP tools, as actions of their own (steps/agent/mcp.py)
        from sealflow.steps.agent import mcp

        more = mcp.tools(x, agent)
        if isinstance(more, Failed):
            return more
        out.update(more)
    return out


def unpack(proposed: Any) -> tuple[Any, Any, Any]:
    """``(name, arguments, id)`` of a :class:`ToolCall` or a map; missing parts are None."""
    if isinstance(proposed, Mapping):
        name, arguments, call_id = proposed.get("name"), proposed.get("arguments", {}), proposed.get("id")
    else:
        name, arguments = getattr(proposed, "name", None), getattr(proposed, "arguments", None)
        call_id = getattr(proposed, "id", None)
    if isinstance(arguments, Mapping) and not isinstance(arguments, dict):
        arguments = dict(arguments)
    return name, arguments, call_id if isinstance(call_id, (str, int)) else None
