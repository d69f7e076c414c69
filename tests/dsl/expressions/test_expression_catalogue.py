"""The catalogue of common mistakes: every entry gives X301, its hint, and points at the culprit."""

from __future__ import annotations

import pytest

from sealflow.dsl.expressions import CATALOGUE, ExpressionError, parse
from sealflow.dsl.expressions.templates import parse_template

#: example -> the text the error offset must point at (the offending character onwards)
OFFENDING = {
    "input.x = 'a'": "= 'a'",
    "input.a && input.b": "&&",
    "input.a & input.b": "& input.b",
    "input.a || input.b": "||",
    "!input.done": "!input",
    "input.x === 'a'": "===",
    "input.x !== 'a'": "!==",
    "input.name == 'abc": "'abc",
    'input.name == "abc': '"abc',
    "len(input.items": "(input",
    "input.items[0 == 1": "[0",
    "{'a': 1": "{'a'",
    "(input.a or input.b))": ")",
    "[1, 2)": ")",
    "input.x == None": "None",
    "input.flag == True": "True",
    "input.flag == False": "False",
    "'a' if input.vip else 'b'": "if input",
    "if input.vip": "if input",
    "input.a elif input.b": "elif",
    "input.name.lower()": "lower()",
    "input.tags.contains('a')": "contains(",
    "$input.x": "$input",
    "${{ input.x }}": "${{",
    "{lead: input.x}": "lead:",
    "input.x == not input.y": "not input.y",
    "1 < input.n < 10": "< 10",
    "input.a == 1 == true": "== true",
    "": "",
}


def test_given_the_catalogue_then_every_entry_has_an_expected_location():
    assert set(OFFENDING) == {example for example, _ in CATALOGUE}


@pytest.mark.parametrize("example, hint", CATALOGUE, ids=[repr(e) for e, _ in CATALOGUE])
def test_given_a_known_mistake_when_parsed_then_x301_with_friendly_hint_at_the_culprit(example, hint):
    with pytest.raises(ExpressionError) as info:
        parse(example)
    error = info.value
    assert error.code == "X301"
    assert error.hint and hint in error.hint, (error.message, error.hint)
    culprit = OFFENDING[example]
    assert error.offset == (example.rindex(culprit) if culprit else 0), (error.offset, error.message)
    assert example[error.offset:].startswith(culprit)


@pytest.mark.parametrize("example, hint", [(e, h) for e, h in CATALOGUE if e and "${{" not in e])
def test_given_a_known_mistake_inside_a_template_when_parsed_then_same_hint_shifted(example, hint):
    template = "prefix ${{ " + example + " }} suffix"
    with pytest.raises(ExpressionError) as info:
        parse_template(template)
    error = info.value
    assert error.code == "X301" and hint in error.hint
    assert template[error.offset:].startswith(OFFENDING[example]) or error.message.startswith("unclosed")


@pytest.mark.parametrize("valid", [
    "input.a != 'b'", "not input.done", "input.a == 'x = y'", "input.s == '&& || ! === $'",
    "lower(input.name)", "input.a == null", "{'lead': input.x}", "1 < input.n and input.n < 10",
    "input.x == 'it\\'s'", "input.None",
])
def test_given_near_misses_that_are_valid_when_parsed_then_no_error(valid):
    parse(valid)
