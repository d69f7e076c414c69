"""Static types read from JSON Schema (dsl/jsontypes.py) and expression types (dsl/expressions/infer.py)."""

from __future__ import annotations

import pytest

from sealflow.dsl import jsontypes as jt
from sealflow.dsl.expressions.infer import infer

LEAD = {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "string"}, "score": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"$ref": "#/$defs/address"}}, "$defs": {"address": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_given_a_schema_then_fields_required_optional_closed_and_refs():
    lead = jt.from_schema(LEAD)
    assert jt.field(lead, "id") == (jt.STRING, False)
    score, missing = jt.field(lead, "score")
    assert not missing and score.kinds == {"integer", "null"}  # optional: may be missing
    assert jt.field(lead, "nope")[1] is True  # properties declared, none other: closed for reading
    address, _ = jt.field(lead, "address")
    assert jt.field(address, "city")[0].kinds == {"string", "null"}  # its parent may be missing
    tags, _ = jt.field(lead, "tags")
    assert jt.field(tags, 0)[0].kinds == {"string", "null"}  # out of range reads null


@pytest.mark.parametrize("schema", [
    {"type": "object"},  # no properties: any field
    {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}},
    {"$ref": "other.json"},  # a reference it cannot follow
    True, {},
])
def test_given_an_open_or_unknown_schema_then_any_field_may_be_read(schema):
    assert jt.field(jt.from_schema(schema), "anything")[1] is False


def test_given_combinators_enum_const_and_type_lists_then_their_kinds():
    assert jt.from_schema({"anyOf": [{"type": "string"}, {"type": "null"}]}).kinds == {"string", "null"}
    assert jt.from_schema({"enum": ["a", 1]}).kinds == {"string", "integer"}
    assert jt.from_schema({"const": True}).kinds == {"boolean"}
    assert jt.from_schema({"type": ["number", "null"]}).kinds == {"number", "integer", "null"}


def test_overlap_and_null():
    assert jt.overlap(jt.INTEGER, jt.NUMBER) and jt.overlap(jt.NUMBER, jt.INTEGER)
    assert not jt.overlap(jt.INTEGER, jt.STRING) and not jt.overlap(jt.BOOLEAN, jt.of("integer"))
    assert jt.overlap(jt.UNKNOWN, jt.STRING) and jt.overlap(jt.STRING, jt.UNKNOWN)
    assert jt.may_break_null(jt.of("string", "null"), jt.STRING)
    assert not jt.may_break_null(jt.of("string", "null"), jt.of("string", "null"))
    assert not jt.overlap(jt.NULL, jt.STRING)


def roots(name, keys):
    if name == "input":
        return jt.from_schema(LEAD), 0
    if name == "index":
        return jt.INTEGER, 0
    return jt.UNKNOWN, len(keys)


@pytest.mark.parametrize("text, kinds", [
    ("input.id", {"string"}),
    ("input.score", {"integer", "null"}),
    ("default(input.score, 0)", {"integer"}),
    ("input.id + '!'", {"string"}),
    ("1 + 2", {"integer"}),
    ("1 / 2", {"number"}),
    ("-input.score", set()),  # nullable operand: not said
    ("len(input.tags)", {"integer"}),
    ("str(input.score)", {"string"}),
    ("input.score > 3 and true", {"boolean"}),
    ("not input.id", {"boolean"}),
    ("[1, 'a']", {"array"}),
    ("{'a': 1}", {"object"}),
    ("input.tags[index]", {"string", "null"}),
    ("input['id']", {"string"}),
    ("steps.x.output.y", set()),
    ("(input.id)", {"string"}),
    ("input.tags + ['x']", {"array"}),
    ("null", {"null"}),
])
def test_inferred_types(text, kinds):
    assert set(infer(text, roots).kinds) == kinds
