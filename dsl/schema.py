"""Validate a loaded definition against ``schemas/workflow.schema.json``.

Every JSON Schema error becomes a located :class:`~sealflow.dsl.errors.Diagnostic`
(:class:`~sealflow.dsl.schema_errors.SchemaErrorMapper`); inline JSON Schemas
(``input.schema``, ``output_schema``) are checked against the 2020-12 metaschema, with a
hint for a misspelt keyword. All errors are reported, best first, without duplicates.
"""

from __future__ import annotations

import copy
import difflib
import functools
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from sealflow import schemas
from sealflow.dsl.crons import cron_problem, timezone_problem
from sealflow.dsl.document import Pointer
from sealflow.dsl.errors import Diagnostic
from sealflow.dsl.kinds import kinds_with
from sealflow.dsl.loader import Document
from sealflow.dsl.schema_errors import SchemaErrorMapper, rank, suggest

# ---------------------------------------------------------------- validator

def _is_cron(value: object) -> bool:
    """True for a cron the language accepts; else ValueError with why (the mapper words it, S209)."""
    if not isinstance(value, str):
        return True
    problem = cron_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return True


def _is_timezone(value: object) -> bool:
    """True for a zone of the tz database; else ValueError with why (S209)."""
    if not isinstance(value, str):
        return True
    problem = timezone_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return True


def format_checker() -> FormatChecker:
    """The format checker of the workflow schema: ``cron`` and ``timezone`` (:mod:`sealflow.dsl.crons`)."""
    checker = FormatChecker(formats=())
    checker.checks("cron", raises=ValueError)(_is_cron)
    checker.checks("timezone", raises=ValueError)(_is_timezone)
    return checker


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schemas.load(), format_checker=format_checker())


@functools.cache
def _meta_validator() -> Draft202012Validator:
    meta = Draft202012Validator.META_SCHEMA
    return Draft202012Validator(meta, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_for_docs() -> dict[str, Any]:
    """A copy of the workflow schema (for documentation generators and editors)."""
    return copy.deepcopy(schemas.load())


# ---------------------------------------------------------------- public API

def validate(doc: Document) -> list[Diagnostic]:
    """Every schema diagnostic for ``doc``, best first; embedded JSON Schemas included."""
    mapper = SchemaErrorMapper(doc, schemas.load())
    found = [d for error in _validator().iter_errors(doc.data) for d in mapper.map(error)]
    for pointer, schema in _embedded_schemas(doc.data):
        found.extend(validate_embedded_schema(schema, doc, pointer))
    return rank(found)


def validate_embedded_schema(schema: Any, doc: Document, pointer: Pointer) -> list[Diagnostic]:
    """Check an inline JSON Schema (``input.schema``, ``output_schema``) against the 2020-12
    metaschema; every problem is S208, located inside the embedded schema."""
    pointer = tuple(pointer)
    meta = _meta_validator()
    meta_schema = Draft202012Validator.META_SCHEMA  # what _meta_validator() validates against
    mapper = SchemaErrorMapper(doc, meta_schema, base=pointer, code="S208")
    found = [d for error in meta.iter_errors(schema) for d in mapper.map(error)]
    if isinstance(schema, dict):
        dialect = schema.get("$schema")
        if isinstance(dialect, str) and dialect.rstrip("#") != meta_schema["$id"].rstrip("#"):
            found.append(mapper.diag(
                pointer + ("$schema",), f"only JSON Schema draft 2020-12 is supported, not {dialect!r}",
                hint="remove $schema or set it to https://json-schema.org/draft/2020-12/schema"))
        found.extend(_misspelt_keywords(schema, pointer, mapper))
    return rank(found)


# ---------------------------------------------------------------- helpers

def _embedded_schemas(data: Any) -> Iterator[tuple[Pointer, dict[str, Any]]]:
    def inline(value: Any) -> bool:
        ref = value.get("$ref") if isinstance(value, dict) else None
        return isinstance(value, dict) and not (isinstance(ref, str) and not ref.startswith("#"))

    if not isinstance(data, dict):
        return
    section = data.get("input")
    if isinstance(section, dict) and inline(section.get("schema")):
        yield ("input", "schema"), section["schema"]
    steps = data.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        for kind in (k.value for k in kinds_with("calls_model")):  # (the kinds with an output_schema)
            body = step.get(kind) if isinstance(step, dict) else None
            if isinstance(body, dict) and inline(body.get("output_schema")):
                yield ("steps", i, kind, "output_schema"), body["output_schema"]


_KEYWORDS = frozenset(Draft202012Validator.VALIDATORS) | {
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "$vocabulary", "definitions",
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
    "contentEncoding", "contentMediaType", "contentSchema",
}
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains",
                  "propertyNames", "not", "if", "then", "else")


def _misspelt_keywords(schema: Any, pointer: Pointer, mapper: SchemaErrorMapper) -> Iterator[Diagnostic]:
    """Keys of an embedded schema that look like a misspelt keyword (``proprties``)."""
    if not isinstance(schema, dict):
        return
    for key in schema:
        if key not in _KEYWORDS and not key.startswith(("x-", "$")):
            guess = suggest(key, _KEYWORDS)
            if guess and difflib.SequenceMatcher(None, key, guess).ratio() >= 0.8:
                yield mapper.diag(pointer + (key,), f"unknown JSON Schema keyword {key!r}; did you mean {guess!r}?",
                                  hint=f"rename it to {guess!r}", key=True)
    for name in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(name), dict):
            for k, sub in schema[name].items():
                yield from _misspelt_keywords(sub, pointer + (name, k), mapper)
    for name in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(name), list):
            for i, sub in enumerate(schema[name]):
                yield from _misspelt_keywords(sub, pointer + (name, i), mapper)
    for name in _SUBSCHEMA_ONE:
        yield from _misspelt_keywords(schema.get(name), pointer + (name,), mapper)


__all__ = ["validate", "validate_embedded_schema", "schema_for_docs", "format_checker"]
