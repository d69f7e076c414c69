"""The expression language: grammar, operators, functions, bounds, references, checks."""

from __future__ import annotations

import math

import pytest

from sealflow.dsl.expressions import (
    CATALOGUE,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_LENGTH,
    EvaluationError,
    Expression,
    ExpressionError,
    Reference,
    check,
    compile_cached,
    evaluate,
    parse,
)

CONTEXT = {
    "input": {"name": "Ada", "n": 5, "f": 2.5, "tags": ["a", "b"], "m": {"k": "v", "z": None},
              "empty": "", "flag": True, "nested": {"list": [{"email": "a@x"}]}},
    "steps": {"fetch": {"output": {"email": "e@x", "score": 90}, "status": "succeeded"}},
    "run": {"id": "run-1", "workflow": "w", "version": 1, "initiator": "user:u", "tenant": "t", "attempt": 1},
    "output": {"classification": "high", "reason": ""},
}


def ev(text: str, context: dict | None = None, **kw):
    return evaluate(parse(text), CONTEXT if context is None else context, **kw)


def error_of(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        parse(text)
    return info.value


# ---------------------------------------------------------------- grammar and precedence

@pytest.mark.parametrize("text, expected", [
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("10 - 4 - 3", 3),                   # left-associative
    ("2 * 3 % 4", 2),                    # (2*3) % 4
    ("-2 * 3", -6),
    ("- -2", 2),
    ("1 + 2 == 3", True),                # arithmetic binds tighter than comparison
    ("not 1 == 2", True),                # not binds looser than comparison
    ("true or false and false", True),   # and binds tighter than or
    ("(true or false) and false", False),
    ("not false and false", False),      # (not false) and false
    ("1 < 2 and 2 < 3", True),
    ("[1, 2, 3][1]", 2),
    ("{'a': {'b': [10, 20]}}['a']['b'][-1]", 20),
    ("[1, 2,]", [1, 2]),                 # a trailing comma is allowed
    ("{'a': 1,}", {"a": 1}),
    ("[]", []),
    ("{}", {}),
    ("len('ab',)", 2),
    ("'it\\'s'", "it's"),
    ('"tab\\there"', "tab\there"),
    ("'\\u00e9'", "é"),
    ("1.5e2", 150.0),
    ("2e3", 2000.0),
    ("null", None),
    ("input.m.k", "v"),
    ("input['m']['k']", "v"),
    ("input.nested.list[0].email", "a@x"),
    ("input.in", None),                  # keywords are fine as field names after a dot
    ("steps.fetch.output.email", "e@x"),
    ("steps.fetch.status", "succeeded"),
    ("run.id", "run-1"),
    ("output.classification", "high"),
    ("input.x\n  or\n  true", True),     # expressions may span lines
])
def test_given_expression_when_evaluated_then_precedence_and_grammar_hold(text, expected):
    assert ev(text) == expected
    assert type(ev(text)) is type(expected)


# ---------------------------------------------------------------- operators

@pytest.mark.parametrize("text, expected", [
    # equality: structural, no cross-type equality except numbers
    ("1 == 1.0", True), ("true == 1", False), ("0 == false", False), ("null == null", True),
    ("'1' == 1", False), ("[1, 2] == [1, 2.0]", True), ("{'a': 1} == {'a': 1}", True),
    ("{'a': 1} != {'a': 2}", True), ("[1] != [1]", False), ("input.missing == null", True),
    # ordering
    ("1 < 2", True), ("2 <= 2", True), ("3 > 2.5", True), ("2 >= 3", False),
    ("'a' < 'b'", True), ("'b' >= 'a'", True),
    # in / not in
    ("'a' in input.tags", True), ("'c' not in input.tags", True), ("'d' in 'Ada'", True),
    ("'k' in input.m", True), ("'x' in input.m", False), ("1 in [1.0]", True),
    ("'a' in null", False), ("1 in input.m", False),
    # arithmetic
    ("1 + 2", 3), ("1 + 2.5", 3.5), ("'a' + 'b'", "ab"), ("[1] + [2]", [1, 2]),
    ("5 - 7", -2), ("3 * 4", 12), ("7 / 2", 3.5), ("6 / 2", 3.0), ("7 % 3", 1), ("-7 % 3", 2),
    ("-input.n", -5),
    # boolean operators give booleans of truthiness and short-circuit
    ("'x' and 1", True), ("'' or 0", False), ("null or []", False), ("not ''", True),
    ("not {}", True), ("not [0]", False), ("false and (1 / 0)", False), ("true or (1 / 0)", True),
])
def test_given_operator_when_evaluated_then_result_follows_the_semantics(text, expected):
    result = ev(text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize("text, fragment", [
    ("1 < 'a'", "cannot compare"),
    ("null < 1", "cannot compare"),
    ("true > false", "cannot compare"),
    ("[1] < [2]", "cannot compare"),
    ("'a' + 1", "str()"),
    ("1 + null", "cannot add"),
    ("[1] + 'a'", "cannot add"),
    ("'a' - 'b'", "needs numbers"),
    ("true * 2", "needs numbers"),
    ("1 / 0", "division by zero"),
    ("1 % 0.0", "division by zero"),
    ("-'a'", "needs a number"),
    ("1 in 'abc'", "needs a string"),
    ("'a' in 5", "needs a list, map or string"),
    ("input.tags.x", "cannot read field 'x' of a list"),
    ("input.tags['x']", "indexed by an integer"),
    ("input.m[0]", "indexed by a string"),
    ("input.n[0]", "cannot index a number"),
    ("input.name.first", "cannot read field"),
    ("input.tags[true]", "indexed by an integer"),
])
def test_given_mismatched_types_when_evaluated_then_evaluation_error(text, fragment):
    with pytest.raises(EvaluationError) as info:
        ev(text)
    assert fragment in str(info.value)
    assert info.value.message == str(info.value)


# ---------------------------------------------------------------- null-safety

@pytest.mark.parametrize("text, expected", [
    ("input.missing", None),
    ("input.missing.deeper.still", None),
    ("input.tags[5]", None),
    ("input.tags[-3]", None),
    ("input.tags[-1]", "b"),
    ("input.missing[0]", None),
    ("input.missing[1 / 0]", None),           # a path stops at null
    ("steps.never_ran.output.email", None),
    ("input.m.z", None),
    ("default(input.missing, 'fallback')", "fallback"),
    ("default(input.m.z, 0)", 0),
    ("default(input.empty, 'x')", ""),        # only null is replaced
    ("'Ada'[0]", "A"),
])
def test_given_missing_data_when_evaluated_then_null_not_error(text, expected):
    assert ev(text) == expected


def test_given_empty_context_when_roots_read_then_null():
    assert evaluate(parse("input.x"), {}) is None
    assert evaluate(parse("run"), {}) is None


# ---------------------------------------------------------------- functions

@pytest.mark.parametrize("text, expected", [
    ("len('abc')", 3), ("len(input.tags)", 2), ("len(input.m)", 2), ("len('')", 0),
    ("lower('AbC')", "abc"), ("upper('abc')", "ABC"),
    ("contains('hello', 'ell')", True), ("contains(input.tags, 'b')", True),
    ("contains(input.m, 'k')", True), ("contains(null, 'k')", False),
    ("startswith('lead_1', 'lead_')", True), ("endswith('a.pdf', '.pdf')", True),
    ("startswith('x', 'y')", False),
    ("default(null, 2)", 2), ("default(1, 2)", 1), ("default(false, true)", False),
    ("int('42')", 42), ("int(' -7 ')", -7), ("int(2.9)", 2), ("int(-2.9)", -2), ("int(true)", 1), ("int(3)", 3),
    ("float('1.5')", 1.5), ("float(2)", 2.0), ("float('-3')", -3.0), ("float('1e3')", 1000.0),
    ("str(1)", "1"), ("str(1.5)", "1.5"), ("str(null)", "null"), ("str(true)", "true"),
    ("str('x')", "x"), ("str({'a': [1, null, 'é']})", '{"a":[1,null,"é"]}'), ("str([])", "[]"),
    ("duration('500ms')", 0.5), ("duration('30s')", 30.0), ("duration('15m')", 900.0),
    ("duration('2h')", 7200.0), ("duration('7d')", 604800.0), ("duration('1.5h')", 5400.0),
])
def test_given_function_when_called_then_pure_result(text, expected):
    result = ev(text)
    assert result == expected
    assert type(result) is type(expected)


def test_given_a_clock_when_now_called_then_epoch_seconds_from_the_clock():
    assert ev("now()", clock=lambda: 1700000000) == 1700000000.0
    assert isinstance(ev("now()", clock=lambda: 1700000000), float)
    assert ev("now() + duration('2h')", clock=lambda: 100.0) == 7300.0


def test_given_no_clock_when_now_called_then_real_time():
    import time
    assert abs(ev("now()") - time.time()) < 5


@pytest.mark.parametrize("text", [
    "len(5)", "len(null)", "lower(1)", "upper(null)", "startswith(1, 'a')", "endswith('a', null)",
    "int('4.5')", "int('abc')", "int(null)", "int([1])", "float('x')", "float('nan')", "float('inf')",
    "float(null)", "duration('15 minutes')", "duration('5w')", "duration(30)", "duration('')",
    "int('99999999999999999999')", "contains(5, 1)",
])
def test_given_bad_argument_when_function_called_then_evaluation_error(text):
    with pytest.raises(EvaluationError):
        ev(text)


def test_given_registry_then_every_listed_function_is_there_with_arity():
    assert set(FUNCTIONS) == {"len", "lower", "upper", "contains", "startswith", "endswith",
                              "default", "int", "float", "str", "now", "duration"}
    for name, (low, high, impl) in FUNCTIONS.items():
        assert 0 <= low <= high and callable(impl), name


# ---------------------------------------------------------------- parse-time errors

@pytest.mark.parametrize("text, code, offset", [
    ("foo(1)", "X305", 0),
    ("input.x == lenght(input.y)", "X305", 11),
    ("len(1, 2)", "X306", 0),
    ("1 + now(1)", "X306", 4),
    ("default(1)", "X306", 0),
    ("inputs.x", "X302", 0),
    ("input.x == bogus", "X302", 11),
    ("len", "X302", 0),
    ("input.x ==", "X301", 10),
    ("input.x )", "X301", 8),
    ("1 +* 2", "X301", 3),
    ("input.x @ 1", "X301", 8),
    ("'\\q'", "X301", 1),
    ("'\\ud800'", "X301", 1),
    ("99999999999999999999", "X301", 0),
    ("1e999", "X301", 0),
    ("{'a': 1, 'a': 2}", "X301", 9),
    ("input..x", "X301", 6),
])
def test_given_bad_text_when_parsed_then_located_expression_error(text, code, offset):
    error = error_of(text)
    assert (error.code, error.offset) == (code, offset), error
    assert error.text == text and error.message


def test_given_unknown_function_when_parsed_then_hint_suggests_the_closest():
    assert "len" in error_of("length(input.x)").hint
    assert "lower" in error_of("lowr(input.x)").hint


def test_given_error_when_formatted_then_caret_points_at_the_offset():
    error = error_of("input.x = 'a'")
    assert error.caret() == "input.x = 'a'\n        ^"
    assert error.line_column() == (1, 9)
    assert "X301" in str(error)
    multi = error_of("input.x and\n  input.y = 1")
    assert multi.line_column() == (2, 11)
    assert multi.caret().splitlines()[1] == " " * 10 + "^"


def test_given_non_text_when_parsed_then_expression_error():
    with pytest.raises(ExpressionError):
        parse(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- bounds

def test_given_text_too_long_when_parsed_then_x307_at_the_limit():
    error = error_of("1 + " * 1100 + "1")
    assert (error.code, error.offset) == ("X307", MAX_LENGTH)


def test_given_text_at_the_limit_when_parsed_then_fine():
    text = "+".join(["1"] * (MAX_LENGTH // 2))
    assert len(text) <= MAX_LENGTH
    assert ev(text) == MAX_LENGTH // 2     # long flat chains are not deep


@pytest.mark.parametrize("text", [
    "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1),
    "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
    "not " * (MAX_DEPTH + 1) + "true",
    "-" * (MAX_DEPTH + 1) + "1",
    "len(" * (MAX_DEPTH + 1) + "'a'" + ")" * (MAX_DEPTH + 1),
    "(" * 2000,
])
def test_given_nesting_too_deep_when_parsed_then_x307(text):
    assert error_of(text).code == "X307"


def test_given_nesting_within_bounds_when_parsed_then_fine():
    assert ev("[" * 20 + "1" + "]" * 20) == eval("[" * 20 + "1" + "]" * 20)
    assert ev("not " * 20 + "true") is True


@pytest.mark.parametrize("text, context", [
    ("input.s + input.s", {"input": {"s": "x" * 600_000}}),
    ("input.l + input.l", {"input": {"l": list(range(60_000))}}),
    ("str(input.l)", {"input": {"l": ["abcdefghij"] * 90_000}}),
    ("upper(input.s)", {"input": {"s": "ß" * 600_000}}),
    ("9223372036854775807 + 1", {}),
    ("-9223372036854775807 - 2", {}),
    ("1e308 * 10", {}),
    ("input.big * input.big * input.big", {"input": {"big": 10**7}}),
])
def test_given_huge_results_when_evaluated_then_evaluation_error(text, context):
    with pytest.raises(EvaluationError):
        evaluate(parse(text), context)


def test_given_deep_context_data_when_compared_then_evaluation_error_not_recursion():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(EvaluationError):
        evaluate(parse("input.a == input.b"), {"input": {"a": deep, "b": deep}})
    with pytest.raises(EvaluationError):
        evaluate(parse("str(input.a)"), {"input": {"a": deep}})


def test_given_odd_context_when_evaluated_then_evaluation_error_only():
    with pytest.raises(EvaluationError):
        evaluate(parse("input.x"), "not a mapping")  # type: ignore[arg-type]
    assert evaluate(parse("input.t[0]"), {"input": {"t": (1, 2)}}) == 1


# ---------------------------------------------------------------- references

def test_given_paths_when_references_extracted_then_roots_steps_fields_and_offsets():
    text = "steps.fetch.output.email != '' and run.id in input.ids and steps['fetch'].status == 'ok'"
    refs = parse(text).references()
    assert refs == [
        Reference("steps", "fetch", "output", 0, len("steps.fetch.output.email")),
        Reference("run", None, "id", text.index("run.id"), len("run.id")),
        Reference("input", None, None, text.index("input.ids"), len("input.ids")),
        Reference("steps", "fetch", "status", text.index("steps['fetch']"), len("steps['fetch'].status")),
    ]
    assert refs[0].path == ("fetch", "output", "email")
    for ref in refs:
        assert text[ref.offset:ref.offset + ref.length].startswith(ref.root)


def test_given_dynamic_index_when_references_extracted_then_static_prefix_only():
    text = "input.items[input.i].name"
    (items, index) = parse(text).references()
    assert items == Reference("input", None, None, 0, len("input.items"))
    assert items.path == ("items",)
    assert index.offset == text.index("input.i]")


def test_given_bare_roots_when_references_extracted_then_listed():
    refs = parse("output and run and steps").references()
    assert [(r.root, r.step, r.field, r.length) for r in refs] == [
        ("output", None, None, 6), ("run", None, None, 3), ("steps", None, None, 5)]


def test_given_calls_when_functions_listed_then_names_and_offsets():
    expr = parse("len(lower(input.x)) > 0 or default(null, now()) > 1")
    assert expr.functions() == [("len", 0), ("lower", 4), ("default", 27), ("now", 41)]


# ---------------------------------------------------------------- static checks

KNOWN = {"fetch", "classify", "record"}
RAN = {"fetch", "classify"}


def codes(text: str, allow_output: bool = False, **kw) -> list[tuple[str, int]]:
    errors = check(parse(text), known_steps=kw.get("known", KNOWN), ran_before=kw.get("ran", RAN),
                   allow_output=allow_output)
    assert all(isinstance(e, ExpressionError) and e.text == text for e in errors)
    return [(e.code, e.offset) for e in errors]


def test_given_valid_references_when_checked_then_no_errors():
    text = "steps.fetch.output.x and steps.classify.status == 'ok' and run.tenant and input.a"
    assert codes(text) == []
    assert codes("output.reason", allow_output=True) == []


def test_given_unknown_step_when_checked_then_x303_at_the_step_id():
    assert codes("steps.fetchh.output") == [("X303", 6)]
    errors = check(parse("steps.fetchh.output"), known_steps=KNOWN, ran_before=RAN, allow_output=False)
    assert "fetch" in errors[0].hint


def test_given_steps_without_a_static_id_when_checked_then_x303():
    assert codes("steps") == [("X303", 0)]
    assert codes("steps[input.k].output") == [("X303", 0)]


def test_given_step_that_cannot_have_run_when_checked_then_x304():
    assert codes("1 + len(steps.record.output)") == [("X304", 14)]
    assert codes("steps['record'].status") == [("X304", 6)]


def test_given_output_outside_validate_when_checked_then_x308():
    assert codes("output.reason != ''") == [("X308", 0)]
    assert codes("output.reason != ''", allow_output=True) == []


def test_given_unknown_field_when_checked_then_x309_at_the_field():
    assert codes("steps.fetch.result") == [("X309", 12)]
    assert codes("steps.fetch") == [("X309", 6)]
    assert codes("run.user") == [("X309", 4)]
    assert codes("run['attempts']") == [("X309", 4)]


def test_given_several_problems_when_checked_then_all_in_text_order():
    assert codes("output or steps.nope.output or run.x or steps.record.status") == [
        ("X308", 0), ("X303", 16), ("X309", 35), ("X304", 46)]


# ---------------------------------------------------------------- API details

def test_given_same_text_when_compiled_cached_then_same_object():
    assert compile_cached("input.x == 1") is compile_cached("input.x == 1")
    assert compile_cached("input.x == 1") == parse("input.x == 1")
    with pytest.raises(ExpressionError):
        compile_cached("input.x = 1")


def test_given_expression_then_it_evaluates_itself_and_reprs():
    expr = parse("input.n * 2")
    assert isinstance(expr, Expression) and expr.text == "input.n * 2"
    assert expr.evaluate(CONTEXT) == 10 and "input.n" in repr(expr)


def test_given_fresh_literals_when_evaluated_twice_then_not_shared():
    expr = parse("[1, {'a': []}]")
    first = evaluate(expr, {})
    first[1]["a"].append(1)
    assert evaluate(expr, {}) == [1, {"a": []}]


def test_given_non_finite_context_float_when_added_then_evaluation_error():
    with pytest.raises(EvaluationError):
        evaluate(parse("input.x + 1"), {"input": {"x": math.inf}})


def test_given_catalogue_then_every_entry_is_a_pair_of_text():
    assert len(CATALOGUE) >= 15
    assert all(isinstance(t, str) and isinstance(h, str) and h for t, h in CATALOGUE)
