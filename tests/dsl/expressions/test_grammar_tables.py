"""The precomputed parser tables: current, equivalent to the grammar, and never used when stale."""

from __future__ import annotations

import sys

import pytest
from lark import Token, Tree
from lark.exceptions import UnexpectedInput

from sealflow.dsl.expressions import CATALOGUE, ExpressionError, parse
from sealflow.dsl.expressions import parser as expr_parser
from sealflow.dsl.expressions import tables as expr_tables
from tools import gen_grammar

VALID = [
    "input.x == 1",
    "steps.fetch.output.email",
    "steps.fetch.output['e-mail'][0].x[-1]",
    "run.id != null and not input.flag or input.n >= 2.5e3",
    "input.tag not in ['a', \"b\", 'c\\'d',] and 'x' in input.s",
    "-input.n * (2 + 3) / 4 % 5 - 6",
    "default(input.email, lower(steps.a.output.name))",
    "{'a': [1, 2.5, true, false, null], 'b': {'c': now()},}",
    "len(input.items) > 0\n  and duration('15m') < 3600",
    "inputs.x or notes.y or nullable",
    "false != 1.5 and true",
    "null",
    "[] + [[1], -2] == ({} == {})",
]


def _shape(node):
    """A tree as nested tuples, with every position Lark recorded (``Tree ==`` ignores them)."""
    if isinstance(node, Token):
        return ("token", node.type, str(node), node.start_pos, node.end_pos, node.line, node.column)
    meta = () if node.meta.empty else (node.meta.start_pos, node.meta.end_pos, node.meta.line,
                                       node.meta.column, node.meta.end_line, node.meta.end_column)
    return (node.data, meta, tuple(_shape(c) if isinstance(c, (Tree, Token)) else c for c in node.children))


def _outcome(parser, text):
    """The tree of ``text``, or what the parser reports about it (parse-state numbers aside)."""
    try:
        return _shape(parser.parse(text))
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        return (type(exc).__name__, getattr(exc, "pos_in_stream", None),
                None if token is None else (token.type, str(token), token.start_pos),
                sorted(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ()))


@pytest.fixture
def fresh_parser():
    """``parser()`` is cached for the process: clear it before and after the test."""
    expr_parser.parser.cache_clear()
    yield expr_parser
    expr_parser.parser.cache_clear()


@pytest.fixture(scope="module")
def built():
    return expr_parser.build()


def test_tables_are_current():
    # Given the grammar and the installed Lark, When the tables are regenerated, Then nothing changes.
    assert expr_parser.grammar_sha256() == expr_tables.GRAMMAR_SHA256
    assert gen_grammar.is_fresh(), "dsl/expressions/tables.py is stale: run `python -m tools.gen_grammar`"
    assert gen_grammar.main(["--check"]) == 0


def test_generation_is_deterministic():
    # Lark numbers states in set order; the generator renumbers them, so two runs agree.
    assert gen_grammar.render() == gen_grammar.render()


def test_check_reports_stale_tables_and_regeneration_fixes_them(tmp_path, capsys):
    stale = tmp_path / "tables.py"
    stale.write_text(gen_grammar.render().replace(expr_tables.GRAMMAR_SHA256, "0" * 64), encoding="utf-8")
    assert gen_grammar.main(["--check", "--path", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert gen_grammar.main(["--check", "--path", str(tmp_path / "missing.py")]) == 1
    assert gen_grammar.main(["--path", str(stale)]) == 0
    assert gen_grammar.main(["--check", "--path", str(stale)]) == 0


def test_the_runtime_parser_comes_from_the_tables(fresh_parser, monkeypatch):
    def slow():
        raise AssertionError("built from the grammar although the tables are current")

    monkeypatch.setattr(fresh_parser, "build", slow)
    assert fresh_parser.current_tables() is not None
    assert fresh_parser.parser().parse("input.x == 1")


@pytest.fixture(scope="module")
def loaded():
    return expr_parser.load(expr_parser.decode(expr_tables.TABLES))


@pytest.mark.parametrize("text", VALID + [bad for bad, _ in CATALOGUE] + ["1 +", "a[", "a.1", "a ! b"])
def test_tables_and_grammar_parse_alike(loaded, built, text):
    # Given one parser loaded from the tables and one built from the grammar, When both parse
    # the same text, Then trees, tokens and positions, or the syntax errors, are identical.
    assert _outcome(loaded, text) == _outcome(built, text)


def test_positions_survive_the_tables(fresh_parser):
    # References and error offsets rely on propagate_positions=True.
    assert fresh_parser.current_tables() is not None
    ref = parse("input.a == steps.fetch.output['email']").references()[1]
    assert (ref.step, ref.field, ref.offset, ref.length) == ("fetch", "output", 11, 27)
    with pytest.raises(ExpressionError) as info:
        parse("input.a == [1, 2")
    assert info.value.offset == 11 and "close it with ']'" in info.value.hint


@pytest.mark.parametrize("stale", [
    ("GRAMMAR_SHA256", "0" * 64),  # a developer edited the grammar
    ("LARK_VERSION", "0.0.0"),     # someone upgraded Lark
])
def test_stale_tables_fall_back_to_the_grammar(fresh_parser, monkeypatch, stale):
    # Given tables that do not match the grammar or Lark, When the parser is needed,
    # Then it is built from the grammar, and parsing works as ever.
    monkeypatch.setattr(expr_tables, *stale)
    calls = []
    build = fresh_parser.build
    monkeypatch.setattr(fresh_parser, "build", lambda: calls.append(1) or build())
    assert fresh_parser.current_tables() is None
    assert fresh_parser.parser().parse("input.x == 1") and calls == [1]
    assert parse("run.id == 'x'").references()[0].offset == 0
    with pytest.raises(ExpressionError) as info:
        parse("input.x = 1")
    assert info.value.offset == 8


def test_missing_tables_fall_back_to_the_grammar(fresh_parser, monkeypatch):
    monkeypatch.delattr(sys.modules["sealflow.dsl.expressions"], "tables")
    monkeypatch.setitem(sys.modules, "sealflow.dsl.expressions.tables", None)  # import fails
    assert fresh_parser.current_tables() is None
    assert fresh_parser.parser().parse("input.x == 1")
