"""The public schema error mapper: any JSON Schema's errors as located, ranked diagnostics."""

from __future__ import annotations

from jsonschema import Draft202012Validator

from sealflow.dsl.loader import load_text
from sealflow.dsl.schema_errors import SchemaErrorMapper, rank, readable

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "limits": {"type": "object", "properties": {"max": {"type": "integer", "minimum": 1}}},
    },
}


def diagnostics(text: str, **options) -> list:
    doc = load_text(text, "thing.yaml")
    return SchemaErrorMapper(doc, SCHEMA, **options).diagnostics(Draft202012Validator(SCHEMA).iter_errors(doc.data))


def test_errors_are_located_readable_and_ranked_best_first():
    # Given a document with an unknown field, a nested range error and a missing field,
    # When its errors are mapped, Then each names its field and line, shallow ones first.
    found = diagnostics("limits:\n  max: 0\nnmae: x\n")
    assert [d.code for d in found] == ["S201", "S202", "S205"]
    assert found[0].message == "workflow: missing required field 'name'"
    assert found[1].message == "unknown field 'nmae' at the top level; did you mean 'name'?"
    assert found[1].location.line == 3
    assert found[2].message == "limits.max: must be at least 1, got 0" and found[2].location.line == 2
    assert found[2].pointer == "limits/max"


def test_the_root_is_named_by_the_subject():
    # Given another kind of document (a policy), When its root is wrong,
    # Then the message names that document, not "workflow".
    assert [d.message for d in diagnostics("[1]\n")] == ["workflow: expected a map, got list"]
    assert [d.message for d in diagnostics("[1]\n", subject="policy")] == ["policy: expected a map, got list"]
    assert readable((), "access policy") == "access policy"
    assert readable(("steps", 2, "retry")) == "steps[2].retry"


def test_one_code_for_an_embedded_schema_and_no_duplicates():
    # Given a code and a base pointer (an embedded schema), Then every diagnostic has that code,
    # is located under the base, and ranking drops exact duplicates.
    doc = load_text("input:\n  schema: {name: 1}\n", "w.yaml")
    mapper = SchemaErrorMapper(doc, SCHEMA, base=("input", "schema"), code="S208")
    found = mapper.diagnostics(Draft202012Validator(SCHEMA).iter_errors({"name": 1}))
    assert [(d.code, d.message) for d in found] == [("S208", "input.schema.name: expected a string, got integer 1")]
    assert rank(found + found) == found
