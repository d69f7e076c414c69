"""Tools for agent steps: an action described to a model as a :class:`~.base.ToolSpec`.

The argument schema is built from the action's Python signature and type hints (the
first parameter, ``ctx``, is not an argument):

* ``str`` string, ``int`` integer, ``float`` number, ``bool`` boolean, ``None`` null;
* ``list[X]``/``tuple[X, ...]``/``set[X]`` array of X; ``dict[str, X]`` object of X;
  bare ``list``/``dict`` any array/object;
* ``X | Y``/``Optional[X]`` a ``type`` list when every branch is a plain type, else ``anyOf``;
* ``Literal[...]`` and ``enum.Enum`` subclasses ``enum``;
* ``Annotated[X, {...}]``: X's schema updated with the map (an author's refinement, e.g.
  ``Annotated[str, {"maxLength": 200}]``);
* no hint or ``Any``: any value.

``required`` lists the parameters without a default; ``additionalProperties`` is false, so
an argument the function does not declare is refused before anything runs. ``*args`` and
``**kwargs`` are never offered to a model.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import hashlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from sealflow.interpreter.core.outcomes import Failed
from sealflow.interpreter.execution.context import Execution
from sealflow.interpreter.providers.base import ToolSpec
from sealflow.interpreter.steps.agent.approval import needs_approval

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_ARRAYS = (list, tuple, set, frozenset)


def parameters_schema(fn: Callable[..., Any]) -> dict:
    """The JSON Schema (2020-12) of ``fn``'s keyword arguments after ``ctx``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"type": "object"}
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - an unresolvable hint means "any value", not a broken tool
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in list(signature.parameters.values())[1:]:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue
        properties[param.name] = type_schema(hints.get(param.name, Any))
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def type_schema(hint: Any) -> dict:
    """The JSON Schema of one type hint (see the module docstring)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is None:
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        base = type_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, dict):
                base = {**base, **extra}
        return base
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        branches = [type_schema(a) for a in args]
        if any(b == {} for b in branches):
            return {}
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            return {"type": list(dict.fromkeys(b["type"] for b in branches))}
        return {"anyOf": branches}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if hint in _ARRAYS or origin in _ARRAYS or origin in (cabc.Sequence, cabc.Iterable, cabc.Collection):
        out: dict[str, Any] = {"type": "array"}
        item_args = [a for a in args if a is not Ellipsis]
        if len(item_args) == 1 or (item_args and all(a == item_args[0] for a in item_args)):
            items = type_schema(item_args[0])
            if items:
                out["items"] = items
        return out
    if hint in (dict, typing.Mapping) or origin in (dict, cabc.Mapping, cabc.MutableMapping):
        out = {"type": "object"}
        if len(args) == 2:
            values = type_schema(args[1])
            if values:
                out["additionalProperties"] = values
        return out
    if hint in (typing.Sequence, typing.Iterable):
        return {"type": "array"}
    return {}


def tool_spec(action: Any) -> ToolSpec:
    """The :class:`ToolSpec` of a registered action (name, docstring, argument schema)."""
    return ToolSpec(name=action.name, description=action.description or "", parameters=parameters_schema(action.fn))


# -- the step's tools ---------------------------------------------------------------------------------
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


@dataclasses.dataclass
class Tool:
    """An allow-listed action, its spec for the model, and why it may not run (None: it may)."""

    name: str
    action: Any
    spec: Any
    validator: Any
    denied: str | None = None
    approval: bool = False  # each call waits for a person's approval


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
    for name in x.step.agent.tools:
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
        denied, gated = None, x.step.agent.approval is not None and needs_approval(x.step.agent, name, act.effect)
        if act.effect == "irreversible" and not gated:
            denied = "irreversible"
        elif not set(act.permissions) <= held:
            denied = "permissions"
        out[name] = Tool(name, act, spec, validator, denied, gated)
    return out
