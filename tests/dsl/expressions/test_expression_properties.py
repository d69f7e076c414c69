"""Property tests: whatever the text, parsing and evaluation fail only with the language's errors."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow.dsl.expressions import EvaluationError, ExpressionError, evaluate, parse
from sealflow.dsl.expressions.templates import parse_template, render, render_value

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

CONTEXT = {
    "input": {"x": "a", "n": 5, "f": -2.5, "l": [1, "two", None, [3]], "m": {"k": "v", "n": None},
              "b": True, "z": 0, "s": ""},
    "steps": {"fetch": {"output": {"email": "e@x", "score": 9}, "status": "succeeded"}},
    "run": {"id": "r", "workflow": "w", "version": 1, "initiator": "user:u", "tenant": "t", "attempt": 1},
    "output": {"classification": "high", "reason": ""},
}

SEEDS = [
    "input.x == 'a'", "steps.fetch.output.email != '' and len(input.l) > 2",
    "default(input.missing, 3) * 2 + input.n % 4", "not (input.b or input.z) and 'k' in input.m",
    "lower(upper(input.x)) in ['a', 'b']", "{'a': [1, 2.5, null], 'b': {'c': true}}['a'][-1]",
    "now() + duration('15m') > 0", "str(input.m) + ':' + str(input.l)", "int('42') / float('2')",
    "output.classification != 'high' or len(output.reason) > 0", "startswith(run.id, 'r')",
    "-input.f - -1", "contains(input.l, 'two') and endswith(input.x, 'a')", "input.l[input.n]",
    "input.x not in input.m", "steps['fetch'].status == \"succeeded\"",
]
ALPHABET = list("abcdefghijklmnopqrstuvwxyz_ABCNTF0123456789 .,:;'\"\\()[]{}=!<>+-*/%&|$@#?~\n\t") + [
    "é", "\u00a0", "\u2028", "😀", "\x00"]
TOKENS = ["input", "steps", "run", "output", "fetch", "x", "l", "m", ".", "[", "]", "(", ")", "{", "}",
          ",", ":", "'a'", '"b"', "1", "2.5", "1e3", "null", "true", "false", "None", "and", "or", "not",
          "in", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "=", "&&", "||", "!", "$",
          "${{", "}}", "len", "lower", "default", "now", "duration", "str", "int", "if", " "]


def _parse_and_evaluate(text: str) -> None:
    try:
        expr = parse(text)
    except ExpressionError as error:
        assert error.code in {"X301", "X302", "X305", "X306", "X307"}
        assert 0 <= error.offset <= len(text)
        assert error.message
        error.caret()
        return
    try:
        evaluate(expr, CONTEXT, clock=lambda: 1000.0)
    except EvaluationError as error:
        assert str(error)


@FAST
@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=80))
def test_given_random_text_when_parsed_and_evaluated_then_only_language_errors(text):
    _parse_and_evaluate(text)


@FAST
@given(st.lists(st.sampled_from(TOKENS), max_size=25).map("".join))
def test_given_random_token_soup_when_parsed_and_evaluated_then_only_language_errors(text):
    _parse_and_evaluate(text)


@st.composite
def mutated(draw, seeds=SEEDS):
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        if action == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS + ALPHABET)) + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 5)):]
        elif action == "replace" and pos < len(text):
            text = text[:pos] + draw(st.sampled_from(ALPHABET)) + text[pos + 1:]
        else:
            text = text[:pos] + text[pos:pos + draw(st.integers(1, 10)) ] * 2 + text[pos + 10:]
    return text


@FAST
@given(mutated())
def test_given_mutated_valid_expression_when_parsed_and_evaluated_then_only_language_errors(text):
    _parse_and_evaluate(text)


# ---------------------------------------------------------------- generated valid expressions

LEAVES = st.sampled_from(["input.x", "input.n", "input.f", "input.l", "input.m", "input.b", "input.z",
                          "input.missing", "steps.fetch.output.score", "run.attempt", "null", "true",
                          "0", "3", "-1.5", "'s'", "''", "[]", "{}", "now()"])


def _combine(children):
    binary = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or",
                              "+", "-", "*", "/", "%"])
    unary = st.sampled_from(["len", "lower", "upper", "int", "float", "str", "not ", "-"])
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(unary, children).map(lambda t: f"({t[0]}({t[1]}))"),
        st.tuples(st.sampled_from(["default", "contains", "startswith", "endswith"]), children, children)
        .map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    )


EXPRESSIONS = st.recursive(LEAVES, _combine, max_leaves=12)


@FAST
@given(EXPRESSIONS)
def test_given_generated_well_formed_expression_when_parsed_then_it_parses_and_evaluates_or_fails_cleanly(text):
    expr = parse(text)  # well-formed by construction: never a syntax error at this size
    try:
        evaluate(expr, CONTEXT, clock=lambda: 1000.0)
    except EvaluationError:
        pass


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=15)


def _literal(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value).replace("\\u", "\\u")  # JSON escapes are the language's escapes
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return f"-{_literal(-value)}"
    if isinstance(value, float):
        return repr(value) if ("e" in repr(value) and "." in repr(value).split("e")[0]) or "e" not in repr(value) \
            else repr(value).replace("e", ".0e")
    return json.dumps(value)


@FAST
@given(JSON)
def test_given_any_json_value_when_written_as_a_literal_then_it_evaluates_to_itself(value):
    text = _literal(value)
    if len(text) > 4096:
        return
    try:
        result = evaluate(parse(text), {})
    except ExpressionError as error:
        assert error.code == "X307" or "-9223372036854775808" in text, (text, error)
        return
    assert result == value
    assert json.dumps(result, sort_keys=True) == json.dumps(value, sort_keys=True)


@FAST
@given(JSON)
def test_given_any_context_when_fixed_expressions_evaluated_then_only_evaluation_errors(value):
    context = {"input": value, "steps": {"fetch": {"output": value, "status": value}}, "run": value,
               "output": value}
    for text in SEEDS:
        try:
            evaluate(parse(text), context, clock=lambda: 0.0)
        except EvaluationError:
            pass


# ---------------------------------------------------------------- templates

TEMPLATE_PIECES = ["${{", "}}", "{", "}", "$", " ", "text ", "'", '"', "\\", "input.x", "input.m",
                   "1 +", "len(", ")", "null", "é", "\n", "steps.fetch.output"]


def _parse_and_render(text: str) -> None:
    try:
        template = parse_template(text)
    except ExpressionError as error:
        assert 0 <= error.offset <= len(text)
        assert error.text == text
        return
    try:
        render(template, CONTEXT, clock=lambda: 0.0)
        render_value({"k": [text]}, CONTEXT, clock=lambda: 0.0)
    except EvaluationError:
        pass


@FAST
@given(st.lists(st.sampled_from(TEMPLATE_PIECES), max_size=20).map("".join))
def test_given_random_template_when_parsed_and_rendered_then_only_language_errors(text):
    _parse_and_render(text)


@FAST
@given(st.lists(st.sampled_from(SEEDS), min_size=1, max_size=3), st.text(max_size=10), st.data())
def test_given_mutated_valid_template_when_parsed_and_rendered_then_only_language_errors(exprs, glue, data):
    template = glue.join("${{ " + e + " }}" for e in exprs)
    _parse_and_render(template)
    _parse_and_render(data.draw(mutated(seeds=[template])))
