"""The loader: safe YAML only, located nodes, and refusals with a location."""

from __future__ import annotations

import time

import pytest

from sealflow.dsl.errors import DefinitionError
from sealflow.dsl.loader import Limits, load_bytes, load_file, load_text


def refused(text: str, **kw) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        load_text(text, "wf.yaml", **kw)
    return info.value


def only(err: DefinitionError):
    assert len(err.diagnostics) == 1
    return err.diagnostics[0]


def test_given_plain_yaml_when_loaded_then_values_and_positions_are_kept():
    doc = load_text("a: 1\nb:\n  - x\n  - {c: true}\n", "wf.yaml")
    assert doc.data == {"a": 1, "b": ["x", {"c": True}]}
    assert str(doc.locate(("b", 1, "c"))) == "wf.yaml:4:9"
    assert str(doc.locate(("b", 1, "c"), key=True)) == "wf.yaml:4:6"
    assert str(doc.locate(("b", 0))) == "wf.yaml:3:5"


def test_given_yaml11_booleans_and_dates_when_loaded_then_they_stay_strings():
    # 'on' is the key of retry classes: YAML 1.1 would make it True
    doc = load_text("on: [timeout]\nyes: no\nwhen: 2026-01-01\n", "wf.yaml")
    assert doc.data == {"on": ["timeout"], "yes": "no", "when": "2026-01-01"}


def test_given_core_scalars_when_loaded_then_they_resolve_by_yaml_12():
    doc = load_text("a: null\nb: ~\nc: true\nd: 0x1f\ne: 0o17\nf: 1.5e3\ng: '1'\nh: -3\n", "wf.yaml")
    assert doc.data == {"a": None, "b": None, "c": True, "d": 31, "e": 15, "f": 1500.0, "g": "1", "h": -3}


@pytest.mark.parametrize("text", [
    "a: !!python/object/apply:os.system ['touch /tmp/sealflow-pwned']\n",
    "a: !!python/name:os.system\n",
    "a: !custom x\n",
    "a: !!binary aGVsbG8=\n",
    "a: !!set {x, y}\n",
])
def test_given_a_non_core_tag_when_loaded_then_refused_and_nothing_runs(text, tmp_path):
    diag = only(refused(text))
    assert diag.code == "Y104"
    assert (diag.location.line, diag.location.column) == (1, 4)


def test_given_duplicate_keys_when_loaded_then_the_second_is_located():
    diag = only(refused("name: a\nsteps: []\nname: b\n"))
    assert diag.code == "Y102" and diag.location.line == 3
    assert "first defined at line 1" in diag.message


@pytest.mark.parametrize("text, line", [("1: x\n", 1), ("a: 1\ntrue: 2\n", 2), ("null: 1\n", 1)])
def test_given_a_non_string_key_when_loaded_then_refused(text, line):
    diag = only(refused(text))
    assert diag.code == "Y103" and diag.location.line == line


def test_given_a_complex_key_when_loaded_then_refused():
    assert only(refused("? [a, b]\n: 1\n")).code == "Y103"


def test_given_a_file_over_the_size_limit_when_loaded_then_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: " + b"x" * 2048 + b"\n")
    with pytest.raises(DefinitionError) as info:
        load_file(path, Limits(max_bytes=1024))
    assert info.value.diagnostics[0].code == "Y108"


def test_given_deep_nesting_when_loaded_then_refused_at_the_level_that_crossed_the_limit():
    diag = only(refused("[" * 100 + "]" * 100))
    assert diag.code == "Y106" and diag.location.column == 65


def test_given_a_billion_laughs_document_when_loaded_then_refused_quickly_with_a_location():
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
        prev = name
    started = time.perf_counter()
    diag = only(refused("\n".join(lines) + "\n"))
    elapsed = time.perf_counter() - started
    assert diag.code == "Y107" and diag.location.line > 1
    assert elapsed < 5, "refusal must not expand the document"  # generous: this is a safety net, not a benchmark


def test_given_small_aliases_when_loaded_then_expanded_with_positions():
    doc = load_text("base: &b {timeout: 5s}\nother: *b\n", "wf.yaml")
    assert doc.data["other"] == {"timeout": "5s"}
    assert doc.data["other"] is not doc.data["base"]
    assert doc.locate(("other", "timeout")).line == 1


@pytest.mark.parametrize("text, code", [
    ("a: [\n", "Y101"),
    ("a: 'unclosed\n", "Y101"),
    ("", "Y112"),
    ("# only a comment\n", "Y112"),
    ("a: 1\n---\nb: 2\n", "Y111"),
    ("a: .inf\n", "Y110"),
    ("<<: {a: 1}\n", "Y105"),
    ("a: *nope\n", "Y101"),
])
def test_given_broken_yaml_when_loaded_then_one_located_error(text, code):
    diag = only(refused(text))
    assert diag.code == code
    assert diag.location.line >= 1 and diag.location.column >= 1


def test_given_bytes_that_are_not_utf8_when_loaded_then_the_bad_byte_is_located():
    with pytest.raises(DefinitionError) as info:
        load_bytes(b"name: ok\nowner: \xff\xfe\n", "wf.yaml")
    diag = info.value.diagnostics[0]
    assert diag.code == "Y109" and (diag.location.line, diag.location.column) == (2, 8)


@pytest.mark.parametrize("text, pointer, offset, expected", [
    ('x: "a == b"\n', ("x",), 2, (1, 7)),
    ("x: 'a == b'\n", ("x",), 2, (1, 7)),
    ("x: a == b\n", ("x",), 2, (1, 6)),
    ("x: |\n  line one\n  two ${{ bad }}\n", ("x",), 13, (3, 7)),
    ("steps:\n  - when: input.a = 1\n", ("steps", 0, "when"), 8, (2, 19)),
])
def test_given_an_offset_inside_a_string_when_located_then_file_line_and_column(text, pointer, offset, expected):
    doc = load_text(text, "wf.yaml")
    loc = doc.locate_in_string(pointer, offset)
    assert (loc.line, loc.column) == expected
