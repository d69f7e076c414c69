"""An action's arguments and result checked against what it declares, before and after it runs.

The compiler checks ``with:`` statically (:mod:`sealflow.dsl.typecheck`); at run time the rendered values are
checked again against the action's input schema (:mod:`.action_schema`), so what reaches the function is what
its signature says: an argument it does not take, a missing one, a value of the wrong type, or a null where it
takes none fails the step with ``invalid_request`` naming the argument and the expression it came from; the
function is never called with it (a null never becomes the text ``None``). A parameter annotated with a
pydantic model, a dataclass or an ``Enum`` receives an instance of it. A result that breaks the declared
output schema (``@action(output_schema=...)`` or the return annotation) fails the step with ``invalid_output``.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import typing
from typing import Any

from sealflow.dsl.jsontypes import subscripts

_lock = threading.Lock()
#: (action name, id of its function) -> (that function, input validator, output validator or None, converters).
#: The function is kept with its entry and compared on every hit: an id is only unique among live objects, and
#: another action registered under the same name later (a module reloaded, a test's) may get the id of one
#: that was freed, whose validators would otherwise be taken for its own
_cache: dict[tuple[str, int], tuple[Any, Any, Any, dict[str, Any]]] = {}


def _compiled(act: Any) -> tuple[Any, Any, dict[str, Any]]:
    key = (act.name, id(act.fn))
    found = _cache.get(key)
    if found is not None and found[0] is act.fn:
        return found[1], found[2], found[3]
    import jsonschema

    inputs = jsonschema.Draft202012Validator(act.input_schema)
    output = act.output_schema
    outputs = jsonschema.Draft202012Validator(output) if isinstance(output, dict) else None
    converters = _converters(act.fn)
    with _lock:
        _cache[key] = (act.fn, inputs, outputs, converters)
    return inputs, outputs, converters


def _converters(fn: Any) -> dict[str, Any]:
    """Parameter -> a pydantic TypeAdapter, for those annotated with a model, a dataclass or an Enum."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable hints: values pass as they are
        return {}
    out = {}
    for name, hint in hints.items():
        if name == "return" or not isinstance(hint, type):
            continue
        if issubclass(hint, enum.Enum) or dataclasses.is_dataclass(hint) or _is_model(hint):
            from pydantic import TypeAdapter

            try:
                out[name] = TypeAdapter(hint)
            except Exception:  # noqa: BLE001 - a type pydantic cannot build (a field of an arbitrary class):
                continue  # its value passes as the JSON it is, as its schema (any value) says
    return out


def _is_model(hint: type) -> bool:
    from pydantic import BaseModel

    return issubclass(hint, BaseModel)


def prepare(act: Any, written: dict[str, Any], args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``args`` (rendered from ``written``, the step's ``with:``) checked and converted for ``act``: the
    arguments to call it with, or a message saying what is wrong (then it must not be called)."""
    validator, _, converters = _compiled(act)
    errors = sorted(validator.iter_errors(args), key=lambda e: (list(e.absolute_path), e.validator))
    if errors:
        return args, _describe(act, written, args, errors[0])
    if not converters:
        return args, None
    out = dict(args)
    for name, adapter in converters.items():
        if name in out and out[name] is not None:
            try:
                out[name] = adapter.validate_python(out[name])
            except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, said plainly
                return args, f"argument {name!r} of action {act.name}{_from(written, name)} does not fit " \
                             f"{getattr(adapter, '_type', 'its type')}: {str(exc)[:400]}"
    return out, None


def _from(written: dict[str, Any], name: str) -> str:
    text = written.get(name)
    return f" (from {text!r})" if isinstance(text, str) and "${{" in text else ""


def _describe(act: Any, written: dict[str, Any], args: dict[str, Any], error: Any) -> str:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        extra = sorted(set(args) - set(act.input_schema.get("properties") or {}))
        takes = ", ".join(sorted(act.input_schema.get("properties") or {})) or "no arguments"
        return f"action {act.name} has no parameter {', '.join(map(repr, extra))}; it takes: {takes}"
    if error.validator == "required":
        return f"action {act.name}: {error.message}; with: does not give it"
    name = path[0] if path else None
    if isinstance(name, str) and args.get(name) is None and len(path) == 1:
        return (f"argument {name!r} of action {act.name} is null{_from(written, name)}, and it does not take "
                "null: give a fallback with default(..., ...) or require the field where it comes from")
    at = subscripts(path[1:])
    where = f"argument {name!r}{at}" if name is not None else "the arguments"
    return f"{where} of action {act.name}{_from(written, name) if isinstance(name, str) else ''}: " \
           f"{error.message[:400]}"


def check_output(act: Any, output: Any) -> str | None:
    """What is wrong with ``output`` against ``act``'s declared output schema (None: nothing, or none declared)."""
    _, validator, _ = _compiled(act)
    if validator is None or not isinstance(output, (dict, list, str, int, float, bool, type(None))):
        return None
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(output))
    if error is None:
        return None
    at = subscripts(error.absolute_path)
    return f"action {act.name} returned a result that breaks its declared output schema" \
           f"{' at output' + at if at else ''}: {error.message[:400]}"


def plan_problems(plan: Any, registry: Any) -> list[str]:
    """The ``with:`` of every step of ``plan`` (and of its compensations) that names an argument an action this
    process registers does not take, or leaves out one it requires: checked at submit, before a run exists, for
    a plan compiled without these actions (an action this process does not register is not judged here)."""
    problems = []
    for _, step in plan.all_steps():
        calls = []
        if step.action is not None and str(step.kind) == "action":
            calls.append((step.action, step.args or {}, "with"))
        if step.compensate is not None:
            calls.append((step.compensate.action, step.compensate.args or {}, "compensate.with"))
        for name, given, where in calls:
            act = registry.get(name)
            if act is None:
                continue
            schema = act.input_schema
            params = schema.get("properties") or {}
            extra = [k for k in given if k not in params] if schema.get("additionalProperties") is False else []
            missing = [r for r in schema.get("required") or () if r not in given]
            if extra:
                problems.append(f"step {step.id!r}: {where} names {', '.join(map(repr, extra))}, which action {name} "
                                f"does not take (it takes: {', '.join(params) or 'no arguments'})")
            if missing:
                problems.append(f"step {step.id!r}: {where} leaves out {', '.join(map(repr, missing))}, which action "
                                f"{name} requires")
    return problems
