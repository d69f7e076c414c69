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
import enum
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from sealflow.interpreter.providers.base import ToolSpec

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
