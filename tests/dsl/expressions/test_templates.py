"""Templates: ``${{ expr }}`` inside text; single templates keep the value's type."""

from __future__ import annotations

import pytest

from sealflow.dsl.expressions import MAX_LENGTH, EvaluationError, Expression, ExpressionError, Reference
from sealflow.dsl.expressions.templates import Template, is_template, parse_template, render, render_value

CONTEXT = {
    "input": {"lead_id": "lead_1", "n": 3, "f": 1.5, "m": {"k": [1, None]}, "flag": False, "none": None},
    "steps": {"fetch": {"output": {"email": "a@x", "tags": ["x", "y"]}, "status": "succeeded"}},
    "run": {"id": "run-9"},
}


def rendered(text: str, context: dict | None = None, **kw):
    return render(parse_template(text), CONTEXT if context is None else context, **kw)


# ---------------------------------------------------------------- single templates

@pytest.mark.parametrize("text, expected", [
    ("${{ input.m }}", {"k": [1, None]}),
    ("${{input.n}}", 3),
    ("${{   input.f   }}", 1.5),
    ("${{ input.flag }}", False),
    ("${{ input.none }}", None),
    ("${{ steps.fetch.output.tags }}", ["x", "y"]),
    ("${{ {'a': {'b': 1}} }}", {"a": {"b": 1}}),
    ("${{ '}}' }}", "}}"),
])
def test_given_exactly_one_expression_when_rendered_then_value_keeps_its_type(text, expected):
    template = parse_template(text)
    assert template.single
    assert rendered(text) == expected
    assert type(rendered(text)) is type(expected)


@pytest.mark.parametrize("text", [" ${{ input.n }}", "${{ input.n }} ", "${{ input.n }}\n",
                                  "${{ input.n }}${{ input.n }}", "plain"])
def test_given_anything_outside_the_braces_when_parsed_then_not_single(text):
    assert not parse_template(text).single
    assert isinstance(rendered(text), str)


# ---------------------------------------------------------------- interpolation

@pytest.mark.parametrize("text, expected", [
    ("lead:${{ input.lead_id }}", "lead:lead_1"),
    ("${{ run.id }}:record", "run-9:record"),
    ("n=${{ input.n }} f=${{ input.f }}", "n=3 f=1.5"),
    ("[${{ input.none }}]", "[]"),
    ("flag=${{ input.flag }} t=${{ true }}", "flag=false t=true"),
    ("m=${{ input.m }}", 'm={"k":[1,null]}'),
    ("tags=${{ steps.fetch.output.tags }}", 'tags=["x","y"]'),
    ("é ${{ 'ü' }}", "é ü"),
    ("Classify: ${{ steps.fetch.output }}", 'Classify: {"email":"a@x","tags":["x","y"]}'),
    ("no expressions here }} {{", "no expressions here }} {{"),
    ("a ${{ '${{' }} b", "a ${{ b"),
    ("${{ 1 }}${{ 2 }}", "12"),
    ("x ${{ {'a': 1} }}}", 'x {"a":1}}'),
    ("", ""),
])
def test_given_text_with_expressions_when_rendered_then_values_interpolated(text, expected):
    assert rendered(text) == expected


def test_given_template_then_parts_and_offsets_locate_each_expression():
    text = "id=${{ run.id }}, email=${{steps.fetch.output.email}}"
    template = parse_template(text)
    assert isinstance(template, Template) and template.text == text
    assert [p for p in template.parts if isinstance(p, str)] == ["id=", ", email="]
    (first, a), (second, b) = template.expressions()
    assert isinstance(first, Expression) and first.text == "run.id" and text[a:].startswith("run.id")
    assert second.text == "steps.fetch.output.email" and text[b:].startswith("steps.fetch")
    assert template.references() == [
        Reference("run", None, "id", a, 6),
        Reference("steps", "fetch", "output", b, len("steps.fetch.output.email")),
    ]


def test_given_template_with_now_when_rendered_then_clock_is_used():
    assert rendered("${{ now() }}", clock=lambda: 42) == 42.0
    assert rendered("t=${{ now() }}", clock=lambda: 42) == "t=42.0"


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("text, code, culprit", [
    ("hello ${{ input.x", "X301", "${{ input.x"),
    ("a ${{ ok }} ${{ input.x", "X302", "ok }}"),
    ("a ${{ input.x }} ${{ input.y", "X301", "${{ input.y"),
    ("hi ${{ input.x = 'a' }}", "X301", "= 'a'"),
    ("hi ${{ 'abc }}", "X301", "'abc"),
    ("hi ${{ {'a': 1 }}", "X301", "{'a'"),
    ("a ${{ }} b", "X301", "${{ }}"),
    ("x ${{ inputs.x }}", "X302", "inputs"),
    ("x ${{ lenn(input.x) }}", "X305", "lenn"),
    ("x ${{ len(1, 2) }}", "X306", "len(1"),
    ("line1\nline2 ${{ input.x && 1 }}", "X301", "&& 1"),
])
def test_given_bad_template_when_parsed_then_error_offset_is_in_the_whole_text(text, code, culprit):
    with pytest.raises(ExpressionError) as info:
        parse_template(text)
    error = info.value
    assert error.code == code, error
    assert error.text == text
    assert text[error.offset:].startswith(culprit), (error.offset, text[error.offset:])


def test_given_error_in_second_line_when_located_then_line_and_column_are_right():
    with pytest.raises(ExpressionError) as info:
        parse_template("first\nsecond ${{ input.x = 1 }}")
    assert info.value.line_column() == (2, 20)


def test_given_too_long_expression_in_template_when_parsed_then_x307_relative_to_the_template():
    text = "x ${{ " + "1+" * 2100 + "1 }}"
    with pytest.raises(ExpressionError) as info:
        parse_template(text)
    assert (info.value.code, info.value.offset) == ("X307", len("x ${{ ") + MAX_LENGTH)


def test_given_runtime_problem_when_rendered_then_evaluation_error():
    with pytest.raises(EvaluationError):
        rendered("${{ 1 / 0 }}")
    with pytest.raises(EvaluationError):
        rendered("x ${{ input.s }} ${{ input.s }}", {"input": {"s": "x" * 600_000}})


# ---------------------------------------------------------------- render_value and is_template

def test_given_nested_arguments_when_rendered_then_only_template_strings_change():
    value = {"lead_id": "${{ input.lead_id }}", "note": "n=${{ input.n }}",
             "list": ["${{ input.m }}", 1, None, True, {"deep": "${{ input.n }}"}],
             "plain": "no template", "${{ input.n }}": "keys are not rendered"}
    assert render_value(value, CONTEXT) == {
        "lead_id": "lead_1", "note": "n=3", "list": [{"k": [1, None]}, 1, None, True, {"deep": 3}],
        "plain": "no template", "${{ input.n }}": "keys are not rendered"}
    assert render_value("${{ input.n }}", CONTEXT) == 3
    assert render_value(7, CONTEXT) == 7


def test_given_bad_template_inside_a_value_when_rendered_then_expression_error():
    with pytest.raises(ExpressionError):
        render_value({"a": ["${{ input.x = 1 }}"]}, CONTEXT)


@pytest.mark.parametrize("text, expected", [
    ("${{ x }}", True), ("a ${{ b", True), ("plain", False), ("$ {{ x }}", False), ("{{ x }}", False),
])
def test_given_text_when_asked_is_template_then_detects_the_marker(text, expected):
    assert is_template(text) is expected
