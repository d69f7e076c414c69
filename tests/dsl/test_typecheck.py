"""Type checks of definitions against their input schema, actions and models (issue 32, dsl/typecheck.py).

Each trap a new user falls into in the scaffold is a located error (or warning) at validate; what is not known
(an action without annotations, a schema Sealflow cannot read) never gives a false error.
"""

from __future__ import annotations

import pytest

from sealflow.dsl.model import ActionInfo
from sealflow.dsl.typecheck import ProjectFacts
from tests.dsl.dsl_helpers import check, codes

GREETING = {"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"],
            "additionalProperties": False}
ACTIONS = {
    "hello.greet": ActionInfo(name="hello.greet", source="actions/hello.py:12", output_schema=GREETING,
                              input_schema={"type": "object", "properties": {"name": {"type": "string"}},
                                            "required": ["name"], "additionalProperties": False}),
    "hello.count": ActionInfo(name="hello.count",
                              input_schema={"type": "object", "additionalProperties": False, "required": ["n"],
                                            "properties": {"n": {"type": "integer"},
                                                           "tags": {"type": "array", "items": {"type": "string"}},
                                                           "mode": {"enum": ["fast", "slow"]},
                                                           "note": {"type": ["string", "null"]}}}),
    "hello.loose": ActionInfo(name="hello.loose"),  # no annotations: every argument is any value
    "hello.secret": ActionInfo(name="hello.secret", secrets=("api_token",),
                               input_schema={"type": "object", "properties": {}, "additionalProperties": False}),
}

INPUT = """\
input:
  schema:
    type: object
    required: [name]
    properties: {name: {type: string, minLength: 1}, nick: {type: string}, age: {type: integer}}
"""


def greet(with_: str, output: str = "${{ steps.greet.output.greeting }}", input_: str = INPUT) -> str:
    return input_ + f"""\
steps:
  - id: greet
    action: hello.greet
    with: {with_}
  - id: done
    succeed: {{output: "{output}"}}
"""


def only(result, code: str):
    found = [d for d in result.diagnostics if d.code == code]
    assert found, f"no {code} in {[d.format() for d in result.diagnostics]}"
    return found[0]


def test_given_the_scaffold_definition_when_checked_with_its_action_then_it_is_clean():
    # Given the definition sealflow init writes, with its action's schemas
    result = check(greet('{name: "${{ input.name }}"}'), actions=ACTIONS)
    # Then nothing is reported
    assert result.diagnostics == [] and result.plan is not None


def test_given_a_misspelt_with_argument_then_c421_at_the_key_with_did_you_mean_and_c422_for_the_missing_one():
    # When with: says nam instead of name
    result = check(greet('{nam: "${{ input.name }}"}'), actions=ACTIONS)
    # Then the unknown argument is located at its key, with the near name, and the missing one is named
    unknown = only(result, "C421")
    assert (unknown.location.line, unknown.location.column) == (13, 12)
    assert "has no parameter 'nam'" in unknown.message and "did you mean 'name'?" in unknown.hint
    assert "actions/hello.py:12" in unknown.message
    assert "'name'" in only(result, "C422").message
    assert result.plan is None


def test_given_a_misspelt_output_field_then_x311_at_the_field_with_did_you_mean():
    result = check(greet('{name: "${{ input.name }}"}', output="${{ steps.greet.output.greting }}"), actions=ACTIONS)
    found = only(result, "X311")
    # Then it points at 'greting' inside the string, and says what the output has and where it is declared
    assert found.location.line == 15 and found.location.column == 47
    assert "no field 'greting'" in found.message and "did you mean steps.greet.output.greeting?" in found.hint
    assert "hello.greet at actions/hello.py:12" in found.hint


def test_given_a_misspelt_input_field_then_x312_and_no_second_error_about_its_type():
    result = check(greet('{name: "${{ input.nme }}"}'), actions=ACTIONS)
    assert codes(result) == ["X312"]
    assert "did you mean input.name?" in only(result, "X312").hint


def test_given_an_input_schema_without_properties_then_any_field_may_be_read():
    result = check(greet('{name: "${{ input.whatever }}"}', input_="input: {schema: {type: object}}\n"),
                   actions=ACTIONS)
    assert "X312" not in codes(result)


@pytest.mark.parametrize("value, problem", [
    ("42", "42 is not of type 'string'"),
    ("[a]", "is not of type 'string'"),
])
def test_given_a_literal_of_the_wrong_type_then_c423(value, problem):
    result = check(greet(f"{{name: {value}}}"), actions=ACTIONS)
    assert problem in only(result, "C423").message


def test_given_an_expression_whose_type_cannot_fit_then_c424_with_a_conversion_hint():
    result = check(greet('{name: "${{ len(input.name) }}"}'), actions=ACTIONS)
    found = only(result, "C424")
    assert "takes string" in found.message and "is integer" in found.message and "str(" in found.hint


def test_given_an_optional_input_into_a_non_null_parameter_then_a_c425_warning_and_default_silences_it():
    # Given nick is optional in the input schema
    warned = check(greet('{name: "${{ input.nick }}"}'), actions=ACTIONS)
    found = only(warned, "C425")
    assert found.severity == "warning" and warned.plan is not None and "default(" in found.hint
    # When it is wrapped in default(), Then nothing is said
    assert check(greet('''{name: "${{ default(input.nick, 'friend') }}"}'''), actions=ACTIONS).diagnostics == []


def test_given_interpolated_text_into_a_string_parameter_then_it_fits():
    assert check(greet('{name: "dear ${{ input.age }}"}'), actions=ACTIONS).diagnostics == []


def test_given_each_parameter_kind_then_literals_and_expressions_are_checked_against_it():
    body = INPUT + """\
steps:
  - id: c
    action: hello.count
    with: {n: "${{ input.age }}", tags: ["${{ input.name }}", x], mode: medium, note: null}
"""
    result = check(body, actions=ACTIONS)
    # Then the enum refuses 'medium' (C423); null fits the nullable note; an optional integer warns (C425)
    assert sorted(codes(result)) == ["C423", "C425"]
    assert "'medium' is not one of ['fast', 'slow']" in only(result, "C423").message


def test_given_a_number_expression_into_an_integer_parameter_then_it_fits():
    body = "steps:\n  - id: c\n    action: hello.count\n    with: {n: \"${{ 2 * 3 }}\"}\n"
    assert check(body, actions=ACTIONS).diagnostics == []


def test_given_an_action_without_annotations_then_nothing_about_its_arguments_or_output_is_reported():
    body = INPUT + """\
steps:
  - id: l
    action: hello.loose
    with: {anything: 1, at: all}
  - id: done
    succeed: {output: "${{ steps.l.output.whatever.deep }}"}
"""
    assert check(body, actions=ACTIONS).diagnostics == []


def test_given_a_set_step_then_its_keys_are_its_output_fields():
    body = """\
steps:
  - id: s
    set: {total: "1 + 2", label: "'x'"}
  - id: done
    succeed: {output: "${{ steps.s.output.totl }}"}
"""
    found = only(check(body, actions=ACTIONS), "X311")
    assert "did you mean steps.s.output.total?" in found.hint and "keys of its set" in found.hint


def test_given_an_ai_output_schema_then_its_fields_are_checked():
    body = """\
budget: {max_tokens: 1000}
steps:
  - id: draft
    ai:
      model: default
      prompt: {template: "hi"}
      output_schema: {type: object, required: [line], properties: {line: {type: string}}}
  - id: done
    succeed: {output: "${{ steps.draft.output.lines }}"}
"""
    assert codes(check(body)) == ["X311"]


def test_given_a_compensation_then_its_with_is_checked_too():
    body = """\
steps:
  - id: greet
    action: hello.greet
    with: {name: x}
    compensate: {action: hello.greet, with: {nmae: y}}
"""
    assert sorted(codes(check(body, actions=ACTIONS))) == ["C421", "C422"]


def test_given_models_known_then_an_unconfigured_model_is_c426_and_unknown_models_are_not_checked():
    body = """\
budget: {max_tokens: 1000}
steps:
  - id: draft
    ai: {model: gpt-5, fallback: [default], prompt: {template: "hi"}}
"""
    from sealflow.dsl.api import check_bytes
    from tests.dsl.dsl_helpers import HEADER

    known = check_bytes((HEADER + body).encode(), "wf.yaml", facts=ProjectFacts(models=frozenset({"default", "gpt"})))
    found = only(known, "C426")
    assert "'gpt-5' is not configured" in found.message and "did you mean 'gpt'?" in found.hint
    assert "C426" not in codes(check(body))


def test_given_a_secret_nothing_provides_then_a_c427_warning():
    from sealflow.dsl.api import check_bytes
    from tests.dsl.dsl_helpers import HEADER

    body = "steps:\n  - id: s\n    action: hello.secret\n"
    held = check_bytes((HEADER + body).encode(), "wf.yaml", actions=ACTIONS,
                       facts=ProjectFacts(secret_known=lambda name: False))
    found = only(held, "C427")
    assert found.severity == "warning" and "SEALFLOW_SECRET_API_TOKEN" in found.hint
    fine = check_bytes((HEADER + body).encode(), "wf.yaml", actions=ACTIONS,
                       facts=ProjectFacts(secret_known=lambda name: True))
    assert fine.diagnostics == []


def test_every_new_code_is_registered_with_its_severity():
    from sealflow.dsl.codes import CODES

    for code, severity in (("C421", "error"), ("C422", "error"), ("C423", "error"), ("C424", "error"),
                           ("C425", "warning"), ("C426", "error"), ("C427", "warning"), ("X311", "error"),
                           ("X312", "error")):
        assert CODES[code][0] == severity


def test_given_a_map_then_its_output_is_a_list_and_a_field_of_it_is_x311():
    body = """\
input: {schema: {type: object, properties: {ids: {type: array, items: {type: string}}}}}
steps:
  - id: each
    map:
      items: "default(input.ids, [])"
      concurrency: 2
      max_items: 10
      steps:
        - id: one
          set: {id: "item"}
  - id: done
    succeed: {output: "${{ steps.each.output.id }}"}
"""
    found = only(check(body), "X311")
    assert "steps.each.output is a list" in found.message and "steps.each.output[0].id" in found.hint
