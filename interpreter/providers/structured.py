"""Schema-constrained output: what adapters send for ``output_schema`` and how they read the answer.

Both APIs want an *object* at the root, so another schema is wrapped as
``{"type": "object", "properties": {"value": S}, "required": ["value"]}`` and the answer
unwrapped (:func:`wrap`, :func:`unwrap`).

**OpenAI strict mode** (:func:`strict_schema`) accepts a subset of JSON Schema: every
object lists all its properties in ``required`` and has ``additionalProperties: false``.
The conversion adds ``additionalProperties: false`` (a stricter schema: its instances
still satisfy the original); makes an optional property required but nullable (the null
is removed from the answer again by :func:`drop_optional_nulls`); and removes validation
keywords strict mode does not accept (``minLength``, ``maxLength``, ``uniqueItems``,
``minProperties``, ``maxProperties``, ...), which Sealflow checks on the answer anyway.
A schema whose *shape* strict mode cannot express (any-value ``{}``, ``additionalProperties``
as a schema, ``patternProperties``, ``allOf``, ``not``, ``if``/``then``, ``$ref``) is sent
non-strict, with a warning; the answer is checked all the same.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

from sealflow.core.errors import StepError

log = logging.getLogger("sealflow.providers")

WRAP_KEY = "value"
_DROPPED = ("minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties", "contains", "minContains",
            "maxContains", "unevaluatedItems", "propertyNames", "dependentRequired", "default", "examples",
            "$schema", "$id", "title", "readOnly", "writeOnly", "deprecated", "contentEncoding", "contentMediaType")
_SHAPE = ("patternProperties", "allOf", "not", "if", "then", "else", "$ref", "$defs", "definitions",
          "dependentSchemas", "unevaluatedProperties", "prefixItems", "oneOf")


class NotStrict(Exception):
    """The schema's shape cannot be expressed in strict mode (the message says why)."""


def is_object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object"


def wrap(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` itself when it describes an object, else an object holding it under ``value``."""
    if is_object_schema(schema):
        return schema
    return {"type": "object", "properties": {WRAP_KEY: schema}, "required": [WRAP_KEY],
            "additionalProperties": False}


def unwrap(schema: dict[str, Any], value: Any) -> Any:
    if is_object_schema(schema) or not isinstance(value, dict) or WRAP_KEY not in value:
        return value
    return value[WRAP_KEY]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]} if kind != "null" else schema
    if isinstance(kind, list):
        return {**schema, "type": kind if "null" in kind else [*kind, "null"]}
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None] if None not in schema["enum"] else schema["enum"]}
    raise NotStrict("an optional property without a type")


def _strict(node: Any, where: str) -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        raise NotStrict(f"{where} accepts any value")
    for key in _SHAPE:
        if key in node:
            raise NotStrict(f"{where} uses {key!r}")
    out = {k: v for k, v in node.items() if k not in _DROPPED}
    if "type" not in out and "enum" not in out and "const" not in out and "anyOf" not in out:
        raise NotStrict(f"{where} has no type")
    if "anyOf" in out:
        out["anyOf"] = [_strict(b, f"{where}.anyOf[{i}]") for i, b in enumerate(out["anyOf"])]
    kind = out.get("type")
    kinds: list[Any] = kind if isinstance(kind, list) else [kind]
    if "object" in kinds:
        extra = out.get("additionalProperties", False)
        if extra not in (False, None) and extra != {} and extra is not True:
            raise NotStrict(f"{where} has additionalProperties as a schema")
        if (extra is True or extra == {}) and not out.get("properties"):
            raise NotStrict(f"{where} is an open map")
        props = out.get("properties") or {}
        required = set(out.get("required") or [])
        out["properties"] = {name: (_strict(p, f"{where}.{name}") if name in required
                                    else _nullable(_strict(p, f"{where}.{name}"))) for name, p in props.items()}
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "array" in kinds and "items" in out:
        out["items"] = _strict(out["items"], f"{where}[]")
    return out


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The strict-mode form of an object schema; :class:`NotStrict` when there is none."""
    return _strict(copy.deepcopy(schema), "output_schema")


def openai_response_format(schema: dict[str, Any], *, strict: bool = True, name: str = "output") -> dict[str, Any]:
    """OpenAI's ``response_format`` for ``schema`` (wrapped), strict when it can be."""
    wrapped = wrap(schema)
    if strict:
        try:
            return {"type": "json_schema", "json_schema": {"name": name, "schema": strict_schema(wrapped),
                                                           "strict": True}}
        except NotStrict as exc:
            log.warning("output_schema sent without strict mode: %s (the answer is still checked)", exc)
    return {"type": "json_schema", "json_schema": {"name": name, "schema": wrapped, "strict": False}}


def drop_optional_nulls(schema: Any, value: Any) -> Any:
    """``value`` without the nulls strict mode put in optional properties whose schema refuses null."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required") or [])
        out = {}
        for key, item in value.items():
            sub = schema["properties"].get(key)
            if item is None and key not in required and sub is not None and not _allows_null(sub):
                continue
            out[key] = drop_optional_nulls(sub, item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [drop_optional_nulls(schema["items"], v) for v in value]
    return value


def _allows_null(schema: Any) -> bool:
    """Whether ``schema`` plainly accepts null (a null type, a null in ``enum``/``const``, or no constraint)."""
    if not isinstance(schema, dict):
        return schema is not False
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema:
        return None in schema["enum"]
    kind = schema.get("type")
    if kind is not None:
        return kind == "null" or (isinstance(kind, list) and "null" in kind)
    if "anyOf" in schema:
        return any(_allows_null(b) for b in schema["anyOf"])
    return True


def parse_output(text: str, schema: dict[str, Any] | None, *, model: str) -> Any:
    """The answer's value: its text without a schema, else its JSON (``invalid_output`` if not JSON; whether
    the JSON satisfies the schema is checked by the step)."""
    if schema is None:
        return text
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        raise StepError("invalid_output", f"model {model!r} answered text that is not JSON where output_schema asks "
                                          f"for JSON: {text[:120]!r}") from None
    return finish_output(schema, value, model=model)


def finish_output(schema: dict[str, Any], value: Any, *, model: str) -> Any:
    """``value`` unwrapped and without strict mode's nulls. It is not checked against ``schema`` here: the
    step does that (``invalid_output``), so the tokens of a wrong answer are still charged."""
    return drop_optional_nulls(schema, unwrap(schema, value))
