"""Regressions from the fuzz run (issue 9): bad numbers and deep aliases get a located error, never E000."""

from __future__ import annotations

import pytest

from sealflow.dsl.api import check_bytes

HEAD = "sealflow: 1\nname: probe\nversion: 1\nowner: team:qa\n"


def check(body: str):
    return check_bytes((HEAD + body).encode(), "wf.yaml")


def codes(result) -> list[str]:
    return [d.code for d in result.diagnostics]


def set_step(value: str) -> str:
    return f"steps:\n  - id: a\n    action: crm.get\n    with:\n      x: {value}\n"


@pytest.mark.parametrize(
    "value, code",
    [
        ("1" * 5000, "Y113"),  # thousands of decimal digits: ValueError (int max str digits) before
        ("0x" + "f" * 5000, "Y113"),  # thousands of hex digits
        ("-" + "9" * 30, "Y113"),
        ("9007199254740993", "Y113"),  # 2^53 + 1: rfc8785 refuses it when digesting the plan
        ("0o" + "7" * 30, "Y113"),
        ("!!float " + "1" * 400, "Y110"),  # OverflowError escaped check_bytes before
        ("!!float 1e400", "Y110"),
        ("1e400", "Y110"),  # compiled to the same digest as null before
        ("-1e400", "Y110"),
        (".inf", "Y110"),
        ("-.inf", "Y110"),
        ("1." + "0" * 500, "Y110"),  # too long a number
    ],
)
def test_given_a_number_json_cannot_hold_when_checked_then_a_located_loader_error(value, code):
    result = check(set_step(value))
    assert codes(result) == [code]
    diag = result.diagnostics[0]
    assert (diag.location.line, diag.location.column) == (9, 10)
    assert diag.hint
    assert len(diag.message) < 300


@pytest.mark.parametrize("value", ["9007199254740991", "-9007199254740991", "!!float 12", "1e300", "0x1f"])
def test_given_a_number_within_range_when_checked_then_it_compiles(value):
    assert check(set_step(value)).plan is not None


@pytest.mark.parametrize("where", ["output: 1e400\n", "budget:\n  max_cost_usd: 1e400\n",
                                   "budget:\n  max_runtime: -1e400\n"])
def test_given_infinity_in_output_or_budget_when_checked_then_refused_before_it_becomes_null(where):
    result = check(where + set_step("1"))
    assert codes(result) == ["Y110"]


def _nest(levels: int, leaf: str) -> str:
    return "[" * levels + leaf + "]" * levels


def test_given_aliases_nesting_past_the_depth_limit_when_checked_then_depth_counts_after_expansion():
    # four aliases of 15 levels each (plus the document's own) give a 75-level value out of 15-level text
    body = "x0: &a0 " + _nest(15, "1") + "\n"
    body += "".join(f"x{i}: &a{i} " + _nest(15, f"*a{i - 1}") + "\n" for i in range(1, 5))
    result = check(body + set_step("*a4"))
    assert "Y106" in codes(result)
    assert "E000" not in codes(result)


def test_given_an_alias_within_the_depth_limit_when_loaded_then_it_is_accepted():
    from sealflow.dsl.loader import load_text

    doc = load_text("a: &a " + _nest(30, "1") + "\nb: *a\n", "wf.yaml")
    assert doc.data["a"] == doc.data["b"]


def test_given_str_of_many_references_to_a_large_input_when_evaluated_then_refused_before_building_it():
    import tracemalloc

    from sealflow.dsl.expressions import EvaluationError, compile_cached, evaluate

    expression = "str([" + ",".join(["input.s"] * 500) + "])"
    tracemalloc.start()
    try:
        with pytest.raises(EvaluationError, match="longer than 1,000,000 characters"):
            evaluate(compile_cached(expression), {"input": {"s": "x" * 4_000_000}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024  # 3.8 GB before the fix


def test_given_a_huge_whole_float_where_an_integer_is_expected_when_checked_then_a_located_error():
    # pydantic reads 9007199254740992.0 as the int 2^53, which rfc8785 refused with an E000 before
    result = check_bytes(HEAD.replace("version: 1", "version: 9007199254740992.0").encode() + set_step("1").encode(),
                         "wf.yaml")
    assert codes(result) == ["S205"]
    assert result.diagnostics[0].location.line == 3
