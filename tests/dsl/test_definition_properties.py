"""Property tests: random and mutated YAML through loader, schema and compiler.

Whatever the bytes, checking a definition ends in success or in located
diagnostics: never an exception, never an internal error (E000).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealflow.dsl.api import check_bytes

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "definitions").glob("*.yaml"))
TEXTS = [p.read_bytes() for p in SOURCES]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    # an unexpected exception must surface as a test failure, not be turned into E000
    monkeypatch.setenv("SEALFLOW_DEBUG", "1")


def assert_well_formed(result, data: bytes) -> None:
    for d in result.diagnostics:
        assert d.code != "E000", d.format()
        assert d.location.line >= 1 and d.location.column >= 1, d.format()
        assert d.location.line <= data.count(b"\n") + 2, d.format()
        assert d.message
    if result.plan is not None:
        assert result.plan.digest.startswith("sha256:")
        assert not result.errors


@SETTINGS
@given(st.binary(max_size=400))
def test_given_random_bytes_when_checked_then_success_or_located_errors(data):
    assert_well_formed(check_bytes(data, "random.yaml"), data)


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("abc:-[]{}'\"#&*!|>?, \n\t$0123456789")), max_size=300))
def test_given_yaml_like_text_when_checked_then_success_or_located_errors(text):
    data = text.encode()
    assert_well_formed(check_bytes(data, "yamlish.yaml"), data)


@st.composite
def mutated(draw):
    source = draw(st.sampled_from(TEXTS))
    lines = source.split(b"\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "insert", "replace_word"]))
        line = lines[i]
        if op == "delete":
            lines.pop(i)
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif op == "truncate" and line:
            lines[i] = line[: draw(st.integers(0, len(line) - 1))]
        elif op == "insert":
            pos = draw(st.integers(0, len(line)))
            junk = draw(st.sampled_from([b":", b"{", b"]", b"'", b'"', b"${{", b"}}", b" and ", b"==", b"-", b"  ",
                                         b"next: end", b"!!python/none", b"*x", b"&x"]))
            lines[i] = line[:pos] + junk + line[pos:]
        elif op == "replace_word":
            words = line.split(b" ")
            j = draw(st.integers(0, len(words) - 1))
            words[j] = draw(st.sampled_from([b"nowhere", b"0", b"-1", b"7h", b"null", b"true", b"[]", b"{}",
                                             b"steps.nope.output", b"input.x = 1", b"unauthorized"]))
            lines[i] = b" ".join(words)
        if not lines:
            lines = [b""]
    return b"\n".join(lines)


@SETTINGS
@given(mutated())
def test_given_a_mutated_definition_when_checked_then_success_or_located_errors(data):
    assert_well_formed(check_bytes(data, "mutated.yaml", lint=True), data)


def test_the_sources_exist():
    assert TEXTS, "definitions/ must hold example workflows"
    assert os.environ.get("SEALFLOW_DEBUG") == "1"
