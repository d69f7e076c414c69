"""What an action takes and returns, as JSON Schema (2020-12), read from its Python declaration.

One description serves three readers: the compiler's type checks of ``with:`` and ``steps.X.output``
(:mod:`sealflow.dsl.typecheck`), an ``agent`` step's tool specs (:mod:`sealflow.steps.agent.tools`),
and the editor schema ``sealflow schema`` writes. Import-light: validation imports action modules, so this
module pulls in no broker and no store (pydantic only when a hint needs it).

The input schema is built from the signature and type hints (the first parameter, ``ctx``, is not an argument):

* ``str`` string, ``int`` integer, ``float`` number, ``bool`` boolean, ``None`` null;
* ``list[X]``/``tuple[X, ...]``/``set[X]``/``Sequence[X]`` array of X; ``dict[str, X]``/``Mapping[str, X]``
  object of X; bare ``list``/``dict`` any array/object;
* ``X | Y``/``Optional[X]`` a ``type`` list when every branch is a plain type, else ``anyOf``;
* ``Literal[...]`` and ``enum.Enum`` subclasses ``enum``;
* ``TypedDict`` an object of its fields (``required`` from its required keys; no other field);
* pydantic models and dataclasses: the schema pydantic gives them (references inlined);
* ``Annotated[X, {...}]``: X's schema updated with the map (an author's refinement, e.g.
  ``Annotated[str, {"maxLength": 200}]``);
* no hint, ``Any`` or a type none of the above describes: any value (``{}``: unknown, never a false error).

``required`` lists the parameters without a default; ``additionalProperties`` is false, so an argument the
function does not declare is refused. ``*args`` and ``**kwargs`` are never offered to a model; as an action's
input schema, a function taking ``**kwargs`` accepts other arguments (``additionalProperties`` true). The output
schema is ``@action(output_schema=...)`` when given, else the return annotation's schema, else None (unknown).
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_ARRAYS = (list, tuple, set, frozenset)
#: how deep a type may nest (a recursive TypedDict stops here as "any value")
_MAX_DEPTH = 12


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - an unresolvable hint means "any value", not a broken action
        return {}


def parameters_schema(fn: Callable[..., Any], *, kwargs_open: bool = False) -> dict[str, Any]:
    """The JSON Schema of ``fn``'s keyword arguments after ``ctx``; with ``kwargs_open`` a function taking
    ``**kwargs`` accepts other arguments (what it can be called with); without, only those it names (what a
    model is offered as a tool)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"type": "object"}
    hints = _hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    open_ = False
    for param in list(signature.parameters.values())[1:]:
        if param.kind is param.VAR_KEYWORD and kwargs_open:
            open_ = True
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue
        properties[param.name] = type_schema(hints.get(param.name, Any))
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": open_}


def return_schema(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The schema of ``fn``'s return annotation, or None when it has none (or it says nothing: ``Any``)."""
    hint = _hints(fn).get("return", inspect.Parameter.empty)
    if hint is inspect.Parameter.empty:
        return None
    schema = type_schema(hint)
    return schema or None


def type_schema(hint: Any, depth: int = 0) -> dict[str, Any]:
    """The JSON Schema of one type hint (see the module docstring)."""
    if depth > _MAX_DEPTH or hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is None:
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        base = type_schema(args[0], depth + 1)
        for extra in args[1:]:
            if isinstance(extra, dict):
                base = {**base, **extra}
        return base
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        branches = [type_schema(a, depth + 1) for a in args]
        if any(b == {} for b in branches):
            return {}
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            return {"type": list(dict.fromkeys(b["type"] for b in branches))}
        return {"anyOf": branches}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if typing.is_typeddict(hint):
        return _typed_dict(hint, depth)
    if hint in _ARRAYS or origin in _ARRAYS or origin in (cabc.Sequence, cabc.Iterable, cabc.Collection):
        out: dict[str, Any] = {"type": "array"}
        item_args = [a for a in args if a is not Ellipsis]
        if len(item_args) == 1 or (item_args and all(a == item_args[0] for a in item_args)):
            items = type_schema(item_args[0], depth + 1)
            if items:
                out["items"] = items
        return out
    if hint in (dict, typing.Mapping) or origin in (dict, cabc.Mapping, cabc.MutableMapping):
        out = {"type": "object"}
        if len(args) == 2:
            values = type_schema(args[1], depth + 1)
            if values:
                out["additionalProperties"] = values
        return out
    if hint in (typing.Sequence, typing.Iterable):
        return {"type": "array"}
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or _is_pydantic_model(hint)):
        return _pydantic_schema(hint)
    return {}


def _typed_dict(hint: Any, depth: int) -> dict[str, Any]:
    try:
        fields = typing.get_type_hints(hint, include_extras=True)
    except Exception:  # noqa: BLE001 - as for a function: unresolvable means any value
        return {"type": "object"}
    properties = {name: type_schema(_strip_required(tp), depth + 1) for name, tp in fields.items()}
    # from the hints, not __required_keys__: under `from __future__ import annotations` Python 3.11 cannot see a
    # NotRequired written as text when the class is made
    total = getattr(hint, "__total__", True)
    required = [name for name, tp in fields.items()
                if typing.get_origin(tp) is typing.Required
                or (total and typing.get_origin(tp) is not typing.NotRequired)]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _strip_required(tp: Any) -> Any:
    """``Required[X]``/``NotRequired[X]``/``ReadOnly[X]`` -> X (their meaning is in ``__required_keys__``)."""
    while typing.get_origin(tp) in (typing.Required, typing.NotRequired):
        tp = typing.get_args(tp)[0]
    return tp


def _is_pydantic_model(hint: type) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover - pydantic is a dependency
        return False
    return issubclass(hint, BaseModel)


def _pydantic_schema(hint: type) -> dict[str, Any]:
    """A pydantic model's or a dataclass's schema, with its ``$defs`` inlined (unknown where they recurse)."""
    try:
        from pydantic import TypeAdapter

        raw = TypeAdapter(hint).json_schema()
    except Exception:  # noqa: BLE001 - a type pydantic cannot describe is any value
        return {}
    return inline_refs(raw)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``#/$defs/NAME`` reference replaced by its definition; a reference inside its
    own definition (a recursive type) becomes ``{}``, any value."""
    defs = schema.get("$defs", {})

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/"):]
                if name in seen or name not in defs:
                    return {}
                return walk(defs[name], seen + (name,))
            return {k: walk(v, seen) for k, v in node.items() if k not in ("$defs", "title")}
        if isinstance(node, list):
            return [walk(v, seen) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema, ())
    return inlined


_PARAM_LINE = re.compile(r"^\s*(?::param\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.+)$")


def parameter_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """Each parameter's description from ``fn``'s docstring: its ``Args:`` (Google) section or ``:param x:``
    lines (reST). Missing or other styles give nothing (the editor shows the type alone)."""
    doc = inspect.getdoc(fn) or ""
    out: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args and stripped and not line.startswith((" ", "\t")):
            in_args = False
        if stripped.startswith(":param ") or in_args:
            match = _PARAM_LINE.match(stripped)
            if match:
                out[match.group("name")] = match.group("text").strip()
    return out


def summary(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring, on one line."""
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def source_of(fn: Callable[..., Any]) -> str | None:
    """``path:line`` where ``fn`` is defined, or None."""
    try:
        code = getattr(inspect.unwrap(fn), "__code__", None)
    except ValueError:  # pragma: no cover - a wrapper cycle
        return None
    if code is None:
        return None
    return f"{code.co_filename}:{code.co_firstlineno}"
