"""The workflow JSON Schema extended with a project's actions, for editors (``sealflow schema``).

The language's schema (``schemas/workflow.schema.json``) accepts any action name and any ``with:``; an editor
given this one completes the project's action names (an enum, each with its description) and, per action, the
names, types and descriptions of its ``with:`` arguments, flags an unknown one and a missing required one.
A value may always be a ``${{ }}`` template instead of a literal of the parameter's type. The compiler's checks
(:mod:`sealflow.dsl.typecheck`) stay the authority: this only moves what they say into the editor.
"""

from __future__ import annotations

import copy
from typing import Any

#: a value written as an expression: accepted wherever a parameter's literal type is
_TEMPLATE = {"type": "string", "pattern": "\\$\\{\\{"}


def editor_schema(base: dict[str, Any], actions: list[dict[str, Any]]) -> dict[str, Any]:
    """``base`` (the workflow schema) with ``actions`` (each :meth:`Action.describe`) built in."""
    schema = copy.deepcopy(base)
    defs = schema["$defs"]
    if not actions:
        return schema
    names = [a["name"] for a in actions]
    defs["actionName"] = {**defs["actionName"], "enum": names,
                          "markdownEnumDescriptions": [_summary(a) for a in actions]}
    defs["step"].setdefault("allOf", [])
    defs["compensate"].setdefault("allOf", [])
    for a in actions:
        with_schema = _with_schema(a)
        if with_schema is None:
            continue
        clause = {"if": {"required": ["action"], "properties": {"action": {"const": a["name"]}}},
                  "then": {"properties": {"with": with_schema}}}
        defs["step"]["allOf"].append(clause)
        defs["compensate"]["allOf"].append(copy.deepcopy(clause))
    schema["description"] = (schema.get("description", "") + " Extended with the project's actions by "
                             "`sealflow schema`; regenerate it when the actions change.").strip()
    return schema


def _summary(a: dict[str, Any]) -> str:
    text = f"**{a['name']}** ({a['effect']})"
    if a.get("description"):
        text += f": {a['description']}"
    if a.get("permissions"):
        text += f"  \npermissions: {', '.join(a['permissions'])}"
    return text


def _with_schema(a: dict[str, Any]) -> dict[str, Any] | None:
    inputs = a.get("input_schema") or {}
    params = inputs.get("properties")
    if not isinstance(params, dict):
        return None
    properties = {}
    for name, sub in params.items():
        described = {k: v for k, v in sub.items() if k == "description"}
        literal = {k: v for k, v in sub.items() if k != "description"}
        properties[name] = {"anyOf": [literal, _TEMPLATE] if literal else [{}], **described}
    out: dict[str, Any] = {"type": "object", "properties": properties,
                           "description": f"The arguments of {a['name']}."}
    if inputs.get("required"):
        out["required"] = list(inputs["required"])
    if inputs.get("additionalProperties") is False:
        out["additionalProperties"] = False
    return out
