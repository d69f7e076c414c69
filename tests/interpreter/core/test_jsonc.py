"""Text a store can hold (core/jsonc.py): outputs and inputs that are not Unicode are refused with where they
are; records (audit details, error messages) are kept, escaped or with what no store holds replaced."""

from __future__ import annotations

import json

import pytest

from sealflow.core.jsonc import (
    REPLACEMENT,
    clean_text,
    dumps,
    dumps_or_none,
    dumps_record,
    short_message,
    too_large,
    unpaired_surrogate,
    utf8_size,
)

#: what json.loads gives for an escape that is half of a surrogate pair
LONE = json.loads('"\\ud800"')


def test_whole_text_is_written_compact_and_unescaped():
    # Given a value with non-ASCII text and a NUL (JSON escapes a control character anyway)
    value = {"name": "Zoë 漢字 🙂", "nul": "a\x00b", "n": [1, 2.5, None, True]}
    # When it is written / Then as compact JSON, non-ASCII kept as it is, and it reads back the same
    text = dumps(value)
    assert text == '{"name":"Zoë 漢字 🙂","nul":"a\\u0000b","n":[1,2.5,null,true]}'
    assert json.loads(text) == value


@pytest.mark.parametrize(("value", "where"), [
    ({"a": {"b": ["ok", f"x{LONE}"]}}, "$.a.b[1]"),
    ([{"k": 1}, {f"key{LONE}": 2}], "$[1] (a key)"),
    (LONE, "$"),
])
def test_text_that_is_not_unicode_is_refused_saying_where(value, where):
    # Given a value holding an unpaired surrogate / When it is written
    with pytest.raises(ValueError, match="is not valid Unicode") as got:
        dumps(value)
    # Then the error names where it is, and nothing was written
    assert f"text at {where} " in str(got.value)
    assert unpaired_surrogate(value) == where
    assert dumps_or_none(value) is None


def test_a_record_keeps_text_that_is_not_unicode_as_its_escapes():
    # Given an audit detail holding an unpaired surrogate
    detail = {"error": f"bad {LONE} text", "fine": "é"}
    # When it is written as a record / Then it is storable (UTF-8), and reads back as the same value
    text = dumps_record(detail)
    text.encode()
    assert "\\ud800" in text and json.loads(text) == detail
    # (whole text stays unescaped)
    assert dumps_record({"fine": "é"}) == '{"fine":"é"}'


@pytest.mark.parametrize(("raw", "clean"), [
    ("plain", "plain"),
    ("nul\x00here", f"nul{REPLACEMENT}here"),
    (f"lone {LONE} surrogate", f"lone {REPLACEMENT} surrogate"),
    ("\ud83d\ude42 paired halves", "🙂 paired halves"),  # two halves that make a pair are that character
    ("Zoë \x00 漢字", f"Zoë {REPLACEMENT} 漢字"),
])
def test_plain_text_has_what_no_store_holds_replaced(raw, clean):
    # Given an error message's text / When it is cleaned / Then it is storable and otherwise the same
    assert clean_text(raw) == clean
    clean_text(raw).encode()
    assert "\x00" not in clean_text(raw)


def test_a_value_nested_past_the_recursion_limit_or_holding_itself_is_refused_not_crashing():
    # Given a list nested 100,000 deep, and a list that holds itself
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    loop: list = []
    loop.append(loop)
    # When each is written / Then a ValueError says why (never a RecursionError), and the surrogate walk
    # (no recursion, each container once) finishes on both
    with pytest.raises(ValueError, match="nests too deeply"):
        dumps({"v": deep})
    with pytest.raises(ValueError, match="[Cc]ircular"):
        dumps({"v": loop})
    assert unpaired_surrogate(deep) is None and unpaired_surrogate(loop) is None
    assert unpaired_surrogate([loop, f"x{LONE}"]) == "$[1]"


def test_a_record_nested_past_the_recursion_limit_is_kept_saying_so():
    # Given an audit detail holding a list nested 100,000 deep
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    # When it is written as a record / Then the record is kept, saying what could not be written
    assert json.loads(dumps_record({"tool_result": deep})) == {
        "unrecorded": "nested too deeply to record (about a thousand levels)"}


def test_too_large_counts_utf8_bytes_and_answers_none_under_the_limit():
    # Given texts of ASCII, of 2-byte and of 4-byte characters
    # When they are measured / Then the size is in UTF-8 bytes, and None under (or at) the limit
    assert utf8_size("abc") == 3 and utf8_size("é") == 2 and utf8_size("\U0001F600") == 4
    assert too_large("a" * 100, 100) is None and too_large("a" * 101, 100) == 101
    assert too_large("é" * 30, 100) is None and too_large("é" * 51, 100) == 102
    assert too_large("\U0001F600" * 26, 100) == 104


def test_short_message_keeps_the_head_and_says_how_much_was_cut():
    # Given a short and a long text / When shortened to 10 characters / Then the short one is unchanged
    assert short_message("hello", 10) == "hello"
    assert short_message("x" * 25, 10) == "xxxxxxxxxx... (15 more characters not kept)"
